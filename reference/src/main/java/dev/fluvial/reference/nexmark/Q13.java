package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.GlobalKTable;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q13, bounded side input join: each bid joined with the GlobalKTable row of its
 * auction id modulo 10,000 (see queries/q13.py for the side-input topic and its rows).
 */
public final class Q13 {
  static final long SIDE_INPUT_ROWS = 10_000;

  private Q13() {}

  /** {@code topics["side_input"]}, else the bid topic's name with -side-input for -bid. */
  static String sideInputTopic(Map<String, String> topics) {
    String named = topics.get("side_input");
    if (named != null) {
      return named;
    }
    String bid = topics.get("bid");
    return (bid.endsWith("-bid") ? bid.substring(0, bid.length() - 4) : bid) + "-side-input";
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    GlobalKTable<String, JsonNode> side =
        b.globalTable(sideInputTopic(topics), Consumed.with(Serdes.String(), Columns.JSON));
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .join(
            side,
            (auction, bid) ->
                String.valueOf(Math.floorMod(bid.get("auction").asLong(), SIDE_INPUT_ROWS)),
            (bid, value) ->
                (JsonNode)
                    Columns.object()
                        .put("auction", bid.get("auction").asLong())
                        .put("bidder", bid.get("bidder").asLong())
                        .put("price", bid.get("price").asLong())
                        .put("dateTime", bid.get("dateTime").asLong())
                        .set("value", value))
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
