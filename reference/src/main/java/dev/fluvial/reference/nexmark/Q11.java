package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Windowed;

/** Nexmark q11, user sessions: bids per bidder per session of 10 s gap (see queries/q11.py). */
public final class Q11 {
  static final long GAP_MS = 10_000;
  static final long GRACE_MS = 10_000;

  private Q11() {}

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        // Only the bidder counts: the repartition carries no more than it needs.
        .map((auction, bid) -> KeyValue.pair(bid.get("bidder").asLong(), bid.get("auction").asLong()))
        .groupByKey(Grouped.with(Serdes.Long(), Serdes.Long()))
        .windowedBy(
            SessionWindows.ofInactivityGapAndGrace(
                Duration.ofMillis(GAP_MS), Duration.ofMillis(GRACE_MS)))
        .count(Materialized.with(Serdes.Long(), Serdes.Long()))
        .toStream()
        .map(Q11::row)
        .to(output, Produced.with(Columns.JSON, Columns.JSON));
  }

  static KeyValue<JsonNode, JsonNode> row(Windowed<Long> session, Long count) {
    long bidder = session.key();
    long start = session.window().start();
    long end = session.window().end();
    ObjectNode key = Columns.object().put("bidder", bidder).put("start", start).put("end", end);
    if (count == null) { // a session merged into another one
      return KeyValue.pair(key, null);
    }
    ObjectNode value =
        Columns.object()
            .put("bidder", bidder)
            .put("bid_count", count)
            .put("starttime", start)
            .put("endtime", end + GAP_MS);
    return KeyValue.pair(key, value);
  }
}
