package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.math.BigDecimal;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/** Nexmark q1, currency conversion (fluvial.bench.nexmark.queries.q1): exact, 3 decimals. */
public final class Q1 {
  private static final BigDecimal RATE = new BigDecimal("0.908");

  private Q1() {}

  public record Row(long auction, long bidder, String price, long dateTime, String extra) {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .mapValues(
            bid ->
                new Row(
                    bid.auction(),
                    bid.bidder(),
                    RATE.multiply(BigDecimal.valueOf(bid.price())).toPlainString(),
                    bid.dateTime(),
                    bid.extra()))
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
