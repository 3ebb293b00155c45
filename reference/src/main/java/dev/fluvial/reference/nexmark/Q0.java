package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/** Nexmark q0, pass-through (fluvial.bench.nexmark.queries.q0). */
public final class Q0 {
  private Q0() {}

  public record Row(long auction, long bidder, long price, long dateTime, String extra) {
    static Row of(Bid bid) {
      return new Row(bid.auction(), bid.bidder(), bid.price(), bid.dateTime(), bid.extra());
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .mapValues(Row::of)
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
