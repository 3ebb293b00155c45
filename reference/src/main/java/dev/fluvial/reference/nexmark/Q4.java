package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.WinningBids.AuctionBid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/** Nexmark q4, average winning price per category (fluvial.bench.nexmark.queries.q4). */
public final class Q4 {
  private Q4() {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    WinningBids.closedAuctions(
            builder,
            topics,
            "q4",
            a -> new Auction(a.id(), null, null, null, null, null, a.expires(), null, a.category(), null))
        .groupBy(
            (key, pair) -> Long.toString(pair.auction().category()),
            Grouped.with(Serdes.String(), Json.serde(AuctionBid.class)))
        .aggregate(
            () -> new Average(0, 0, 0),
            (category, pair, total) ->
                Average.of(total.sum() + pair.bid().price(), total.count() + 1),
            Materialized.with(Serdes.String(), Json.serde(Average.class)))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Json.serde(Average.class)));
  }
}
