package dev.fluvial.reference;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Duration;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Branched;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Named;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.kstream.Suppressed;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.kstream.WindowedSerdes;

/**
 * The topologies the differential tests run, by name. Each has a twin written with fluvial's DSL
 * in tests/reference/topologies.py; the two must stay in step (same operators, same serdes, same
 * window sizes), so that their output topics can be compared byte for byte.
 *
 * <p>Input formats (all keys and values are UTF-8 strings):
 *
 * <ul>
 *   <li>page views: value {@code {"period": 45000, "category": "news"}} (figure2,
 *       repartition-aggregate, suppress);
 *   <li>table rows: the same JSON, or a tombstone (table-aggregate);
 *   <li>join sides: value {@code L:<payload>} or {@code R:<payload>}; a payload of {@code -}
 *       stands for a deletion where a side is read as a table. Both sides share one topic so
 *       that both engines process them in one order: the topic's offset order.
 * </ul>
 */
final class Topologies {
  static final long WINDOW_MS = 5_000;
  static final long GRACE_MS = 2_000;
  static final long JOIN_DIFFERENCE_MS = 2_000;
  static final long JOIN_GRACE_MS = 1_000;

  private static final Serde<String> STRING = Serdes.String();
  private static final Serde<Long> LONG = Serdes.Long();
  private static final ObjectMapper JSON = new ObjectMapper();

  /** Adds one topology to a builder: (builder, [input, output]). */
  interface Definition {
    void build(StreamsBuilder builder, String input, String output);
  }

  static final Map<String, Definition> ALL = new TreeMap<>();

  static {
    ALL.put("figure2", Topologies::figure2);
    ALL.put("suppress", Topologies::suppress);
    ALL.put("repartition-aggregate", Topologies::repartitionAggregate);
    ALL.put("table-aggregate", Topologies::tableAggregate);
    ALL.put("table-reduce", Topologies::tableReduce);
    ALL.put("stream-stream-inner", (b, in, out) -> streamStream(b, in, out, "inner"));
    ALL.put("stream-stream-left", (b, in, out) -> streamStream(b, in, out, "left"));
    ALL.put("stream-stream-outer", (b, in, out) -> streamStream(b, in, out, "outer"));
    ALL.put("stream-table-inner", (b, in, out) -> streamTable(b, in, out, false));
    ALL.put("stream-table-left", (b, in, out) -> streamTable(b, in, out, true));
    ALL.put("table-table-inner", (b, in, out) -> tableTable(b, in, out, "inner"));
    ALL.put("table-table-left", (b, in, out) -> tableTable(b, in, out, "left"));
    ALL.put("table-table-outer", (b, in, out) -> tableTable(b, in, out, "outer"));
  }

  private Topologies() {}

  // -- page views --------------------------------------------------------------------------

  private static JsonNode json(String value) {
    try {
      return JSON.readTree(value);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static long period(String view) {
    return json(view).get("period").asLong();
  }

  private static String category(String view) {
    return json(view).get("category").asText();
  }

  /** The windowed count of long page views per category, before its output. */
  private static KTable<Windowed<String>, Long> windowedCounts(StreamsBuilder b, String input) {
    return b.stream(input, Consumed.with(STRING, STRING))
        .filter((user, view) -> period(view) >= 30_000)
        .map((user, view) -> KeyValue.pair(category(view), view))
        // The key changed: the grouping repartitions, with explicit serdes on both engines.
        .groupByKey(Grouped.with(STRING, STRING))
        .windowedBy(
            TimeWindows.ofSizeAndGrace(Duration.ofMillis(WINDOW_MS), Duration.ofMillis(GRACE_MS)))
        .count(Materialized.with(STRING, LONG));
  }

  private static Produced<Windowed<String>, Long> windowedOutput() {
    return Produced.with(WindowedSerdes.timeWindowedSerdeFrom(String.class, WINDOW_MS), LONG);
  }

  /** The paper's Figure 2: every revision of every 5 s window's count. */
  static void figure2(StreamsBuilder b, String input, String output) {
    windowedCounts(b, input).toStream().to(output, windowedOutput());
  }

  /** Figure 2 with one final count per window, emitted once the window closes. */
  static void suppress(StreamsBuilder b, String input, String output) {
    windowedCounts(b, input)
        .suppress(Suppressed.untilWindowCloses(Suppressed.BufferConfig.unbounded()))
        .toStream()
        .to(output, windowedOutput());
  }

  /** Re-key by category, then sum seconds viewed per category: two sub-topologies. */
  static void repartitionAggregate(StreamsBuilder b, String input, String output) {
    b.stream(input, Consumed.with(STRING, STRING))
        .selectKey((user, view) -> category(view))
        .groupByKey(Grouped.with(STRING, STRING))
        .aggregate(
            () -> 0L,
            (category, view, seconds) -> seconds + period(view) / 1000,
            Materialized.with(STRING, LONG))
        .toStream()
        .to(output, Produced.with(STRING, LONG));
  }

  // -- tables ------------------------------------------------------------------------------

  /** Each user's latest view, summed per category: tombstones and moves subtract. */
  static void tableAggregate(StreamsBuilder b, String input, String output) {
    b.table(input, Consumed.with(STRING, STRING))
        .groupBy(
            (user, view) -> KeyValue.pair(category(view), period(view)),
            Grouped.with(STRING, LONG))
        .aggregate(
            () -> 0L,
            (category, period, total) -> total + period,
            (category, period, total) -> total - period,
            Materialized.with(STRING, LONG))
        .toStream()
        .to(output, Produced.with(STRING, LONG));
  }

  /** The same per-category sum with reduce(adder, subtractor), values as strings. */
  static void tableReduce(StreamsBuilder b, String input, String output) {
    b.table(input, Consumed.with(STRING, STRING))
        .groupBy(
            (user, view) -> KeyValue.pair(category(view), Long.toString(period(view))),
            Grouped.with(STRING, STRING))
        .reduce(
            (total, period) -> Long.toString(Long.parseLong(total) + Long.parseLong(period)),
            (total, period) -> Long.toString(Long.parseLong(total) - Long.parseLong(period)),
            Materialized.with(STRING, STRING))
        .toStream()
        .to(output, Produced.with(STRING, STRING));
  }

  // -- joins -------------------------------------------------------------------------------

  /** The left and right sides of a join input, their markers stripped, "-" read as null. */
  private static KStream<String, String>[] sides(StreamsBuilder b, String input) {
    Map<String, KStream<String, String>> branches =
        b.stream(input, Consumed.with(STRING, STRING))
            .split(Named.as("side-"))
            .branch((key, value) -> value != null && value.startsWith("L:"), Branched.as("left"))
            .branch((key, value) -> value != null && value.startsWith("R:"), Branched.as("right"))
            .noDefaultBranch();
    @SuppressWarnings("unchecked")
    KStream<String, String>[] result =
        new KStream[] {
          branches.get("side-left").mapValues(Topologies::payload),
          branches.get("side-right").mapValues(Topologies::payload)
        };
    return result;
  }

  private static String payload(String marked) {
    String payload = marked.substring(2);
    return payload.equals("-") ? null : payload;
  }

  /** The joiner of every join topology; a missing side prints as "null" on both engines. */
  private static String joined(String left, String right) {
    return left + "+" + right;
  }

  static void streamStream(StreamsBuilder b, String input, String output, String kind) {
    KStream<String, String>[] sides = sides(b, input);
    // Deletions mean nothing to a stream join: keep them out so both engines see the same.
    KStream<String, String> left = sides[0].filter((k, v) -> v != null);
    KStream<String, String> right = sides[1].filter((k, v) -> v != null);
    JoinWindows windows =
        JoinWindows.ofTimeDifferenceAndGrace(
            Duration.ofMillis(JOIN_DIFFERENCE_MS), Duration.ofMillis(JOIN_GRACE_MS));
    StreamJoined<String, String, String> serdes = StreamJoined.with(STRING, STRING, STRING);
    KStream<String, String> result =
        switch (kind) {
          case "inner" -> left.join(right, Topologies::joined, windows, serdes);
          case "left" -> left.leftJoin(right, Topologies::joined, windows, serdes);
          case "outer" -> left.outerJoin(right, Topologies::joined, windows, serdes);
          default -> throw new IllegalArgumentException(kind);
        };
    result.to(output, Produced.with(STRING, STRING));
  }

  static void streamTable(StreamsBuilder b, String input, String output, boolean leftJoin) {
    KStream<String, String>[] sides = sides(b, input);
    KStream<String, String> stream = sides[0].filter((k, v) -> v != null);
    KTable<String, String> table = sides[1].toTable(Materialized.with(STRING, STRING));
    Joined<String, String, String> serdes = Joined.with(STRING, STRING, STRING);
    KStream<String, String> result =
        leftJoin
            ? stream.leftJoin(table, Topologies::joined, serdes)
            : stream.join(table, Topologies::joined, serdes);
    result.to(output, Produced.with(STRING, STRING));
  }

  static void tableTable(StreamsBuilder b, String input, String output, String kind) {
    KStream<String, String>[] sides = sides(b, input);
    KTable<String, String> left = sides[0].toTable(Materialized.with(STRING, STRING));
    KTable<String, String> right = sides[1].toTable(Materialized.with(STRING, STRING));
    KTable<String, String> result =
        switch (kind) {
          case "inner" -> left.join(right, Topologies::joined);
          case "left" -> left.leftJoin(right, Topologies::joined);
          case "outer" -> left.outerJoin(right, Topologies::joined);
          default -> throw new IllegalArgumentException(kind);
        };
    result.toStream().to(output, Produced.with(STRING, STRING));
  }
}
