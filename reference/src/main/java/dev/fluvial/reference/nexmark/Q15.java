package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.LongNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
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
 * Nexmark q15, bidding statistics per day, its distinct counts as two aggregations: bids per
 * rank of each (day, bidder) and (day, auction) fact key, then those rows added to and
 * subtracted from the day's statistics (see queries/q15.py).
 */
public final class Q15 {
  static final String[] COLUMNS = {
    "total_bids", "rank1_bids", "rank2_bids", "rank3_bids",
    "total_bidders", "rank1_bidders", "rank2_bidders", "rank3_bidders",
    "total_auctions", "rank1_auctions", "rank2_auctions", "rank3_auctions",
  };

  private Q15() {}

  static List<KeyValue<String, Integer>> facts(String auction, JsonNode bid) {
    String day = Columns.day(bid.get("dateTime").asLong());
    int rank = Columns.priceRank(bid.get("price").asLong());
    return List.of(
        KeyValue.pair(day + "|B|" + bid.get("bidder").asLong(), rank),
        KeyValue.pair(day + "|A|" + bid.get("auction").asLong(), rank));
  }

  static JsonNode emptyCounts() {
    return Columns.MAPPER.createArrayNode().add(0).add(0).add(0);
  }

  static JsonNode countRank(String key, Integer rank, JsonNode counts) {
    ArrayNode row = (ArrayNode) counts.deepCopy();
    int r = rank;
    row.set(r, LongNode.valueOf(row.get(r).asLong() + 1));
    return row;
  }

  static JsonNode initial() {
    ObjectNode stats = Columns.object();
    for (String column : COLUMNS) {
      stats.put(column, 0L);
    }
    return stats;
  }

  /**
   * Adds (sign 1) or subtracts (sign -1) a fact row {@code [kind, c1, c2, c3, ...]} to the
   * statistics. A new fact key's old row is the initializer's (no bids): it counts for nothing.
   */
  static void count(ObjectNode stats, JsonNode row, int sign) {
    long c1 = row.get(1).asLong();
    long c2 = row.get(2).asLong();
    long c3 = row.get(3).asLong();
    String column;
    if (row.get(0).asText().equals("B")) {
      add(stats, "total_bids", sign * (c1 + c2 + c3));
      add(stats, "rank1_bids", sign * c1);
      add(stats, "rank2_bids", sign * c2);
      add(stats, "rank3_bids", sign * c3);
      column = "bidders";
    } else {
      column = "auctions";
    }
    add(stats, "total_" + column, c1 + c2 + c3 > 0 ? sign : 0);
    add(stats, "rank1_" + column, c1 > 0 ? sign : 0);
    add(stats, "rank2_" + column, c2 > 0 ? sign : 0);
    add(stats, "rank3_" + column, c3 > 0 ? sign : 0);
  }

  private static void add(ObjectNode stats, String column, long delta) {
    stats.put(column, stats.get(column).asLong() + delta);
  }

  static JsonNode change(String day, JsonNode row, JsonNode stats, int sign) {
    ObjectNode next = (ObjectNode) stats.deepCopy();
    next.put("day", day);
    count(next, row, sign);
    return next;
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .flatMap(Q15::facts)
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Integer()))
        .aggregate(Q15::emptyCounts, Q15::countRank, Materialized.with(Serdes.String(), Columns.JSON))
        .groupBy(
            (key, counts) -> {
              // The fact row regrouped by its day, its kind (B or A) in front of the counts.
              ArrayNode row = Columns.MAPPER.createArrayNode().add(key.substring(11, 12));
              row.addAll((ArrayNode) counts);
              return KeyValue.pair(key.substring(0, 10), (JsonNode) row);
            },
            Grouped.with(Serdes.String(), Columns.JSON))
        .aggregate(
            Q15::initial,
            (day, row, stats) -> change(day, row, stats, 1),
            (day, row, stats) -> change(day, row, stats, -1),
            Materialized.with(Serdes.String(), Columns.JSON))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
