package dev.fluvial.reference.differential;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.stream.Stream;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.BuiltInDslStoreSuppliers;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.ValueAndTimestamp;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs generated differential cases in Kafka Streams' own TopologyTestDriver, many per JVM.
 *
 * <pre>
 * java -cp fluvial-reference.jar dev.fluvial.reference.differential.DifferentialMain CASES RESULTS
 * java -cp fluvial-reference.jar dev.fluvial.reference.differential.DifferentialMain - -
 * </pre>
 *
 * <p>CASES holds one JSON case per line (the format of src/fluvial/verify/differential/); RESULTS
 * gets one JSON result per line, in the same order: every output topic's records (key and value
 * bytes in hex, timestamp, headers) and the final contents of every named store, or the error.
 * With "-" for both it serves cases from stdin to stdout, one result line per case line, flushed
 * after each, so one JVM serves a whole session of cases (the shrinker's included).
 */
public final class DifferentialMain {
  // StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX
  private static final String EMIT_INTERVAL_OUTER_JOIN =
      "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__";
  // StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION
  private static final String EMIT_INTERVAL_WINDOWED_AGGREGATION =
      "__emit.interval.ms.kstreams.windowed.aggregation__";
  private static final ObjectMapper JSON = new ObjectMapper();
  private static final HexFormat HEX = HexFormat.of();

  private DifferentialMain() {}

  public static void main(String[] args) throws IOException {
    if (args.length != 2) {
      System.err.println("usage: DifferentialMain CASES.jsonl RESULTS.jsonl");
      System.exit(2);
    }
    Path stateRoot = Files.createTempDirectory("fluvial-differential-");
    try (BufferedReader in =
            args[0].equals("-")
                ? new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
                : Files.newBufferedReader(Path.of(args[0]), StandardCharsets.UTF_8);
        BufferedWriter out =
            args[1].equals("-")
                ? new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8))
                : Files.newBufferedWriter(Path.of(args[1]), StandardCharsets.UTF_8)) {
      String line;
      int n = 0;
      while ((line = in.readLine()) != null) {
        if (line.isBlank()) {
          continue;
        }
        JsonNode testCase = JSON.readTree(line);
        ObjectNode result = run(testCase, stateRoot.resolve(String.valueOf(n++)));
        out.write(JSON.writeValueAsString(result));
        out.newLine();
        out.flush();
      }
    } finally {
      deleteTree(stateRoot);
    }
    // Drivers may leave non-daemon threads behind; the results are all written.
    System.exit(0);
  }

  static Properties config(JsonNode testCase, Path stateDir) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, "differential");
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9");
    // Caching off: every update is its own revision, as in fluvial's run.
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    // Left/outer stream-stream joins and aggregations that emit on window close look for closed
    // windows on every record, as fluvial does, instead of at most once per second of wall-clock
    // time (see docs/semantics.md). The driver's clock stands still, so with the default interval
    // they would look only once.
    props.put(EMIT_INTERVAL_OUTER_JOIN, 0L);
    props.put(EMIT_INTERVAL_WINDOWED_AGGREGATION, 0L);
    if ("in_memory".equals(testCase.path("store_type").asText("rocksdb"))) {
      props.put(
          StreamsConfig.DSL_STORE_SUPPLIERS_CLASS_CONFIG,
          BuiltInDslStoreSuppliers.InMemoryDslStoreSuppliers.class);
    }
    return props;
  }

  static ObjectNode run(JsonNode testCase, Path stateDir) {
    ObjectNode result = JSON.createObjectNode();
    result.put("id", testCase.get("id").asText());
    TopologyTestDriver driver = null;
    try {
      StreamsBuilder builder = new StreamsBuilder();
      new CaseBuilder(builder).build(testCase);
      Topology topology = builder.build();
      driver = new TopologyTestDriver(topology, config(testCase, stateDir), Instant.ofEpochMilli(0));
      Map<String, TestInputTopic<String, String>> inputs = new LinkedHashMap<>();
      for (JsonNode record : testCase.get("inputs")) {
        String topic = record.get(0).asText();
        TestInputTopic<String, String> input = inputs.get(topic);
        if (input == null) {
          input = createInput(driver, topic);
          inputs.put(topic, input);
        }
        String key = record.get(1).isNull() ? null : record.get(1).asText();
        String value = record.get(2).isNull() ? null : record.get(2).asText();
        input.pipeInput(key, value, record.get(3).asLong());
      }
      ObjectNode outputs = result.putObject("outputs");
      for (JsonNode node : testCase.get("nodes")) {
        if (!node.get("op").asText().equals("to")) {
          continue;
        }
        String topic = node.get("topic").asText();
        TestOutputTopic<byte[], byte[]> output =
            driver.createOutputTopic(
                topic, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        ArrayNode records = outputs.putArray(topic);
        for (TestRecord<byte[], byte[]> record : output.readRecordsToList()) {
          ArrayNode r = records.addArray();
          r.add(record.key() == null ? null : HEX.formatHex(record.key()));
          r.add(record.value() == null ? null : HEX.formatHex(record.value()));
          r.add(record.timestamp());
          ArrayNode headers = r.addArray();
          for (Header header : record.headers()) {
            headers.addArray().add(header.key()).add(HEX.formatHex(header.value()));
          }
        }
      }
      ObjectNode stores = result.putObject("stores");
      for (JsonNode node : testCase.get("nodes")) {
        String kind = node.path("store_kind").asText("");
        if (!node.hasNonNull("store") || kind.isEmpty() || kind.equals("versioned")) {
          continue;
        }
        stores.set(node.get("store").asText(), storeContents(driver, node.get("store").asText(), kind));
      }
    } catch (Throwable error) {
      result.remove("outputs");
      result.remove("stores");
      StringWriter trace = new StringWriter();
      error.printStackTrace(new PrintWriter(trace));
      result.put("error", error.toString());
      result.put("trace", trace.toString());
    } finally {
      if (driver != null) {
        try {
          driver.close();
        } catch (Throwable ignored) {
          // A failed case may leave the driver unable to close; its error is already recorded.
        }
      }
      deleteTree(stateDir);
    }
    return result;
  }

  private static TestInputTopic<String, String> createInput(TopologyTestDriver driver, String topic) {
    return driver.createInputTopic(topic, new StringSerializer(), new StringSerializer());
  }

  private static String show(Object value) {
    return value == null ? null : value.toString();
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  static ArrayNode storeContents(TopologyTestDriver driver, String name, String kind) {
    List<String[]> rows = new ArrayList<>();
    switch (kind) {
      case "kv":
        try (KeyValueIterator<Object, ValueAndTimestamp<Object>> it =
            driver.<Object, Object>getTimestampedKeyValueStore(name).all()) {
          while (it.hasNext()) {
            KeyValue<Object, ValueAndTimestamp<Object>> kv = it.next();
            rows.add(row(show(kv.key), kv.value));
          }
        }
        break;
      case "window":
        try (KeyValueIterator<Windowed<Object>, ValueAndTimestamp<Object>> it =
            driver.<Object, Object>getTimestampedWindowStore(name).all()) {
          while (it.hasNext()) {
            KeyValue<Windowed<Object>, ValueAndTimestamp<Object>> kv = it.next();
            Windowed<Object> w = kv.key;
            rows.add(row(w.key() + "@" + w.window().start() + "@" + w.window().end(), kv.value));
          }
        }
        break;
      case "session":
        try (KeyValueIterator<Windowed<Object>, Object> it =
            driver.<Object, Object>getSessionStore(name).fetch(null, null)) {
          while (it.hasNext()) {
            KeyValue<Windowed<Object>, Object> kv = it.next();
            Windowed<Object> w = kv.key;
            rows.add(
                new String[] {
                  w.key() + "@" + w.window().start() + "@" + w.window().end(), show(kv.value), "-1"
                });
          }
        }
        break;
      default:
        throw new IllegalArgumentException("unknown store kind " + kind);
    }
    rows.sort(Comparator.comparing((String[] r) -> r[0]));
    ArrayNode out = JSON.createArrayNode();
    for (String[] r : rows) {
      out.addArray().add(r[0]).add(r[1]).add(Long.parseLong(r[2]));
    }
    return out;
  }

  private static String[] row(String key, ValueAndTimestamp<Object> value) {
    if (value == null) {
      return new String[] {key, null, "-1"};
    }
    return new String[] {key, show(value.value()), String.valueOf(value.timestamp())};
  }

  private static void deleteTree(Path root) {
    if (!Files.exists(root)) {
      return;
    }
    try (Stream<Path> paths = Files.walk(root)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException ignored) {
      // Temporary state only.
    }
  }
}
