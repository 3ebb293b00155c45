package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/** Nexmark q2, selection (fluvial.bench.nexmark.queries.q2). */
public final class Q2 {
  private Q2() {}

  public record Row(long auction, long price) {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .filter((key, bid) -> bid.auction() % 123 == 0)
        .mapValues(bid -> new Row(bid.auction(), bid.price()))
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
