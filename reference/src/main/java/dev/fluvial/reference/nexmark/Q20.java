package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.Model.Bid;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;

/**
 * Nexmark q20, expand bid with auction (fluvial.bench.nexmark.queries.q20): bids joined with
 * their category-10 auction, a stream-stream join of 20 s either way and 10 s of grace.
 */
public final class Q20 {
  static final long CATEGORY = 10;
  static final Duration JOIN = Duration.ofSeconds(20);
  static final Duration GRACE = Duration.ofSeconds(10);

  private Q20() {}

  public record Row(
      long auction,
      long bidder,
      long price,
      String channel,
      String url,
      long bid_dateTime,
      String bid_extra,
      String itemName,
      String description,
      long initialBid,
      long reserve,
      long auction_dateTime,
      long expires,
      long seller,
      long category,
      String auction_extra) {
    static Row of(Bid bid, Auction auction) {
      return new Row(
          bid.auction(), bid.bidder(), bid.price(), bid.channel(), bid.url(), bid.dateTime(),
          bid.extra(), auction.itemName(), auction.description(), auction.initialBid(),
          auction.reserve(), auction.dateTime(), auction.expires(), auction.seller(),
          auction.category(), auction.extra());
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    KStream<String, Auction> category10 =
        builder
            .stream(topics.get("auction"), Consumed.with(Serdes.String(), Json.serde(Auction.class)))
            .filter((id, auction) -> auction.category() == CATEGORY);
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .join(
            category10,
            Row::of,
            JoinWindows.ofTimeDifferenceAndGrace(JOIN, GRACE),
            StreamJoined.with(Serdes.String(), Json.serde(Bid.class), Json.serde(Auction.class)))
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
