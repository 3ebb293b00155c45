package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q18, last bid (fluvial.bench.nexmark.queries.q18): per (auction, bidder), the bid with
 * the latest dateTime, the later read winning a tie.
 */
public final class Q18 {
  private Q18() {}

  /** The output key. */
  public record Pair(long auction, long bidder) {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .map((auction, bid) -> KeyValue.pair(new Pair(bid.auction(), bid.bidder()), bid))
        .groupByKey(Grouped.with(Json.serde(Pair.class), Json.serde(Bid.class)))
        .reduce(
            (last, bid) -> bid.dateTime() >= last.dateTime() ? bid : last,
            Materialized.with(Json.serde(Pair.class), Json.serde(Bid.class)))
        .toStream()
        .to(output, Produced.with(Json.serde(Pair.class), Json.serde(Bid.class)));
  }
}
