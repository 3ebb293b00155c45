package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q19, auction top 10: each auction's ten highest bids, with their rank_number, equal
 * prices in arrival order, as one list per auction (see queries/q19.py).
 */
public final class Q19 {
  static final int TOP = 10;

  private Q19() {}

  static JsonNode enter(String auction, JsonNode bid, JsonNode top) {
    long price = bid.get("price").asLong();
    int size = top.size();
    if (size >= TOP && price <= top.get(size - 1).get("price").asLong()) {
      return top;
    }
    int at = size;
    while (at > 0 && top.get(at - 1).get("price").asLong() < price) {
      at--; // after every bid of an equal price
    }
    ArrayNode ranked = Columns.MAPPER.createArrayNode();
    for (int i = 0; i < at; i++) {
      ranked.add(top.get(i));
    }
    ranked.add(((ObjectNode) bid.deepCopy()).put("rank_number", at + 1));
    for (int i = at; i < Math.min(size, TOP - 1); i++) {
      JsonNode below = top.get(i);
      ranked.add(((ObjectNode) below.deepCopy()).put("rank_number", below.get("rank_number").asInt() + 1));
    }
    return ranked;
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .groupByKey(Grouped.with(Serdes.String(), Columns.JSON))
        .aggregate(
            () -> Columns.MAPPER.createArrayNode(),
            Q19::enter,
            Materialized.with(Serdes.String(), Columns.JSON))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
