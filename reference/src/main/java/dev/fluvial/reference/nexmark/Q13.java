package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q13, bounded side input join (fluvial.bench.nexmark.queries.q13): each bid joined with
 * the GlobalKTable row of its auction id modulo 10,000 (the module describes the side-input topic
 * and its rows).
 */
public final class Q13 {
  static final long SIDE_INPUT_ROWS = 10_000;

  private Q13() {}

  public record Row(long auction, long bidder, long price, long dateTime, String value) {}

  /** {@code topics["side_input"]}, else the bid topic's name with -side-input for -bid. */
  static String sideInputTopic(Map<String, String> topics) {
    String named = topics.get("side_input");
    if (named != null) {
      return named;
    }
    String bid = topics.get("bid");
    return (bid.endsWith("-bid") ? bid.substring(0, bid.length() - 4) : bid) + "-side-input";
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    GlobalKTable<String, String> side =
        builder.globalTable(
            sideInputTopic(topics), Consumed.with(Serdes.String(), Json.serde(String.class)));
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .join(
            side,
            (auction, bid) -> Long.toString(Math.floorMod(bid.auction(), SIDE_INPUT_ROWS)),
            (bid, value) -> new Row(bid.auction(), bid.bidder(), bid.price(), bid.dateTime(), value))
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
