package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.LongNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.fasterxml.jackson.databind.node.TextNode;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q16, channel statistics per day: q15's two aggregations with the channel in both keys,
 * and the latest minute of each (channel, day), a maximum only ever added to (see
 * queries/q16.py).
 */
public final class Q16 {
  private Q16() {}

  static List<KeyValue<String, JsonNode>> facts(String auction, JsonNode bid) {
    long dateTime = bid.get("dateTime").asLong();
    String day = Columns.day(dateTime);
    String channel = bid.get("channel").asText();
    JsonNode value =
        Columns.MAPPER
            .createArrayNode()
            .add(Columns.priceRank(bid.get("price").asLong()))
            .add(Columns.minute(dateTime));
    return List.of(
        KeyValue.pair(day + "|B|" + bid.get("bidder").asLong() + "|" + channel, value),
        KeyValue.pair(day + "|A|" + bid.get("auction").asLong() + "|" + channel, value));
  }

  static JsonNode emptyRow() {
    return Columns.MAPPER.createArrayNode().add(0).add(0).add(0).add("");
  }

  static JsonNode countRank(String key, JsonNode fact, JsonNode row) {
    ArrayNode next = (ArrayNode) row.deepCopy();
    int rank = fact.get(0).asInt();
    next.set(rank, LongNode.valueOf(next.get(rank).asLong() + 1));
    String minute = fact.get(1).asText();
    if (minute.compareTo(next.get(3).asText()) > 0) {
      next.set(3, TextNode.valueOf(minute));
    }
    return next;
  }

  static KeyValue<JsonNode, JsonNode> byChannelDay(String key, JsonNode row) {
    String[] parts = key.split("\\|", 4);
    JsonNode group = Columns.object().put("channel", parts[3]).put("day", parts[0]);
    ArrayNode value = Columns.MAPPER.createArrayNode().add(parts[1]);
    value.addAll((ArrayNode) row);
    return KeyValue.pair(group, value);
  }

  static JsonNode initial() {
    ObjectNode stats = (ObjectNode) Q15.initial();
    stats.put("minute", "");
    return stats;
  }

  static JsonNode change(JsonNode group, JsonNode row, JsonNode stats, int sign) {
    ObjectNode next = (ObjectNode) stats.deepCopy();
    next.set("channel", group.get("channel"));
    next.set("day", group.get("day"));
    String minute = row.get(4).asText();
    if (sign > 0 && minute.compareTo(next.get("minute").asText()) > 0) {
      next.put("minute", minute);
    }
    Q15.count(next, row, sign);
    return next;
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .flatMap(Q16::facts)
        .groupByKey(Grouped.with(Serdes.String(), Columns.JSON))
        .aggregate(Q16::emptyRow, Q16::countRank, Materialized.with(Serdes.String(), Columns.JSON))
        .groupBy(Q16::byChannelDay, Grouped.with(Columns.JSON, Columns.JSON))
        .aggregate(
            Q16::initial,
            (group, row, stats) -> change(group, row, stats, 1),
            (group, row, stats) -> change(group, row, stats, -1),
            Materialized.with(Columns.JSON, Columns.JSON))
        .toStream()
        .to(output, Produced.with(Columns.JSON, Columns.JSON));
  }
}
