package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import java.util.function.UnaryOperator;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Produced;

/** Nexmark q9, winning bids (fluvial.bench.nexmark.queries.q9): each closed auction's row. */
public final class Q9 {
  private Q9() {}

  public record Row(
      long id,
      String itemName,
      String description,
      long initialBid,
      long reserve,
      long dateTime,
      long expires,
      long seller,
      long category,
      String extra,
      long auction,
      long bidder,
      long price,
      long bid_dateTime,
      String bid_extra) {
    static Row of(Auction a, Bid b) {
      return new Row(
          a.id(), a.itemName(), a.description(), a.initialBid(), a.reserve(), a.dateTime(),
          a.expires(), a.seller(), a.category(), a.extra(), b.auction(), b.bidder(), b.price(),
          b.dateTime(), b.extra());
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    WinningBids.closedAuctions(builder, topics, "q9", UnaryOperator.identity())
        .mapValues(pair -> Row.of(pair.auction(), pair.bid()))
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
