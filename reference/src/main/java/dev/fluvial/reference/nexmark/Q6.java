package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.WinningBids.AuctionBid;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q6, average selling price by seller (fluvial.bench.nexmark.queries.q6): the last 10
 * closed auctions of each seller, ordered by expiry then auction id.
 */
public final class Q6 {
  private static final int LAST = 10;
  private static final Comparator<List<Long>> ORDER =
      Comparator.<List<Long>, Long>comparing(e -> e.get(0)).thenComparing(e -> e.get(1));

  private Q6() {}

  /** The seller's last closed auctions as [expires, id, price], oldest first, and their sum. */
  public record Last(List<List<Long>> auctions, long sum) {
    Last add(AuctionBid pair) {
      Auction auction = pair.auction();
      List<List<Long>> kept = new ArrayList<>(auctions.size() + 1);
      for (List<Long> entry : auctions) {
        if (entry.get(1).longValue() != auction.id()) {
          kept.add(entry);
        }
      }
      kept.add(List.of(auction.expires(), auction.id(), pair.bid().price()));
      kept.sort(ORDER);
      List<List<Long>> last = kept.subList(Math.max(0, kept.size() - LAST), kept.size());
      long sum = 0;
      for (List<Long> entry : last) {
        sum += entry.get(2);
      }
      return new Last(List.copyOf(last), sum);
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    WinningBids.closedAuctions(
            builder,
            topics,
            "q6",
            a -> new Auction(a.id(), null, null, null, null, null, a.expires(), a.seller(), null, null))
        .groupBy(
            (key, pair) -> Long.toString(pair.auction().seller()),
            Grouped.with(Serdes.String(), Json.serde(AuctionBid.class)))
        .aggregate(
            () -> new Last(List.of(), 0),
            (seller, pair, last) -> last.add(pair),
            Materialized.with(Serdes.String(), Json.serde(Last.class)))
        .toStream()
        .mapValues(last -> Average.of(last.sum(), last.auctions().size()))
        .to(output, Produced.with(Serdes.String(), Json.serde(Average.class)));
  }
}
