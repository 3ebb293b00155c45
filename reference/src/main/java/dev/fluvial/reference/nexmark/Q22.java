package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q22, url directories (fluvial.bench.nexmark.queries.q22): pieces 3, 4 and 5 of the url
 * split on every '/', empty pieces kept, null past its end.
 */
public final class Q22 {
  private Q22() {}

  public record Row(
      long auction, long bidder, long price, String channel, String dir1, String dir2, String dir3) {}

  static Row row(Bid bid) {
    String[] pieces = bid.url().split("/", -1);
    return new Row(
        bid.auction(), bid.bidder(), bid.price(), bid.channel(),
        pieces.length > 3 ? pieces[3] : null,
        pieces.length > 4 ? pieces[4] : null,
        pieces.length > 5 ? pieces[5] : null);
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .mapValues(Q22::row)
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
