package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.WallclockTimestampExtractor;

/**
 * Nexmark q12, processing-time windows: bids per bidder per 10 s of wall clock, the bid source
 * timed by {@link WallclockTimestampExtractor} (see queries/q12.py).
 */
public final class Q12 {
  static final long WINDOW_MS = 10_000;
  static final long GRACE_MS = 10_000;

  private Q12() {}

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(
            topics.get("bid"),
            Consumed.with(Serdes.String(), Columns.JSON)
                .withTimestampExtractor(new WallclockTimestampExtractor()))
        .map((auction, bid) -> KeyValue.pair(bid.get("bidder").asLong(), bid.get("auction").asLong()))
        .groupByKey(Grouped.with(Serdes.Long(), Serdes.Long()))
        .windowedBy(
            TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
        .count(Materialized.with(Serdes.Long(), Serdes.Long()))
        .toStream()
        .map(Q12::row)
        .to(output, Produced.with(Columns.JSON, Columns.JSON));
  }

  static KeyValue<JsonNode, JsonNode> row(Windowed<Long> window, Long count) {
    long bidder = window.key();
    long start = window.window().start();
    long end = window.window().end();
    return KeyValue.pair(
        Columns.object().put("bidder", bidder).put("start", start).put("end", end),
        Columns.object()
            .put("bidder", bidder)
            .put("bid_count", count)
            .put("starttime", start)
            .put("endtime", end));
  }
}
