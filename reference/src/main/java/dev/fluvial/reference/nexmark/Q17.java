package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q17, auction statistics per day: per (auction, day), bids per price rank and min, max,
 * integer average and sum of the prices (see queries/q17.py).
 */
public final class Q17 {
  private static final String[] RANKS = {"rank1_bids", "rank2_bids", "rank3_bids"};

  private Q17() {}

  static JsonNode initial() {
    return Columns.object().put("total_bids", 0L);
  }

  static JsonNode add(JsonNode group, Long price, JsonNode row) {
    ObjectNode next;
    if (row.get("total_bids").asLong() == 0) {
      next =
          Columns.object()
              .put("total_bids", 0L)
              .put("rank1_bids", 0L)
              .put("rank2_bids", 0L)
              .put("rank3_bids", 0L)
              .put("min_price", price)
              .put("max_price", price)
              .put("avg_price", 0L)
              .put("sum_price", 0L);
      next.set("auction", group.get("auction"));
      next.set("day", group.get("day"));
    } else {
      next = (ObjectNode) row.deepCopy();
    }
    long total = next.get("total_bids").asLong() + 1;
    long sum = next.get("sum_price").asLong() + price;
    String rank = RANKS[Columns.priceRank(price)];
    next.put("total_bids", total);
    next.put(rank, next.get(rank).asLong() + 1);
    next.put("min_price", Math.min(next.get("min_price").asLong(), price));
    next.put("max_price", Math.max(next.get("max_price").asLong(), price));
    next.put("sum_price", sum);
    next.put("avg_price", sum / total);
    return next;
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .map(
            (auction, bid) ->
                KeyValue.pair(
                    (JsonNode)
                        Columns.object()
                            .put("auction", bid.get("auction").asLong())
                            .put("day", Columns.day(bid.get("dateTime").asLong())),
                    bid.get("price").asLong()))
        .groupByKey(Grouped.with(Columns.JSON, Serdes.Long()))
        .aggregate(Q17::initial, Q17::add, Materialized.with(Columns.JSON, Columns.JSON))
        .toStream()
        .to(output, Produced.with(Columns.JSON, Columns.JSON));
  }
}
