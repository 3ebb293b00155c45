package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q18, last bid: per (auction, bidder), the bid with the latest dateTime, the later read
 * winning a tie (see queries/q18.py).
 */
public final class Q18 {
  private Q18() {}

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .map(
            (auction, bid) ->
                KeyValue.pair(
                    (JsonNode)
                        Columns.object()
                            .put("auction", bid.get("auction").asLong())
                            .put("bidder", bid.get("bidder").asLong()),
                    bid))
        .groupByKey(Grouped.with(Columns.JSON, Columns.JSON))
        .reduce(
            (last, bid) ->
                bid.get("dateTime").asLong() >= last.get("dateTime").asLong() ? bid : last,
            Materialized.with(Columns.JSON, Columns.JSON))
        .toStream()
        .to(output, Produced.with(Columns.JSON, Columns.JSON));
  }
}
