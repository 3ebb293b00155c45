package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.Comparator;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Stream;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyDescription;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.test.TestRecord;

/**
 * Runs Nexmark queries in Kafka Streams' own TopologyTestDriver on one input, for the check that
 * fluvial's twins write the same bytes.
 *
 * <pre>
 * java -cp fluvial-reference.jar dev.fluvial.reference.nexmark.TestDriverMain INPUT.jsonl OUT_DIR q11 q13 ...
 * </pre>
 *
 * <p>INPUT holds one record per line, piped in order: {@code {"topic", "key", "value",
 * "timestamp"}} (key and value as UTF-8 text). The queries read the topics {@code nx-person},
 * {@code nx-auction}, {@code nx-bid} (and {@code nx-side-input}) and write {@code nx-out}; each
 * query's output records go to {@code OUT_DIR/<query>.jsonl}, one {@code {"key", "value",
 * "timestamp"}} per line (text, or null). The record cache is off, so every revision is there.
 */
public final class TestDriverMain {
  static final Map<String, String> TOPICS =
      Map.of("person", "nx-person", "auction", "nx-auction", "bid", "nx-bid");
  static final String OUTPUT = "nx-out";
  private static final ObjectMapper JSON = new ObjectMapper();

  private TestDriverMain() {}

  public static void main(String[] args) throws IOException {
    if (args.length < 3) {
      System.err.println("usage: TestDriverMain INPUT.jsonl OUT_DIR QUERY...");
      System.exit(2);
    }
    List<JsonNode> input;
    try (Stream<String> lines = Files.lines(Path.of(args[0]), StandardCharsets.UTF_8)) {
      input = lines.filter(line -> !line.isBlank()).map(TestDriverMain::parse).toList();
    }
    Path outDir = Files.createDirectories(Path.of(args[1]));
    for (int i = 2; i < args.length; i++) {
      run(args[i], input, outDir.resolve(args[i] + ".jsonl"));
    }
    // Drivers may leave non-daemon threads behind; the results are all written.
    System.exit(0);
  }

  private static JsonNode parse(String line) {
    try {
      return JSON.readTree(line);
    } catch (IOException e) {
      throw new IllegalArgumentException("not a JSON record: " + line, e);
    }
  }

  static void run(String query, List<JsonNode> input, Path out) throws IOException {
    Queries.Query definition = Queries.ALL.get(query);
    if (definition == null) {
      throw new IllegalArgumentException("unknown query " + query + "; known: " + Queries.ALL.keySet());
    }
    StreamsBuilder builder = new StreamsBuilder();
    definition.build(builder, TOPICS, OUTPUT);
    Topology topology = builder.build();
    Set<String> sources = sourceTopics(topology);
    Path stateDir = Files.createTempDirectory("nexmark-ttd-");
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, "nexmark-test");
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "127.0.0.1:9");
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    try (TopologyTestDriver driver =
            new TopologyTestDriver(topology, props, Instant.ofEpochMilli(0));
        BufferedWriter writer = Files.newBufferedWriter(out, StandardCharsets.UTF_8)) {
      Map<String, TestInputTopic<String, String>> inputs = new HashMap<>();
      for (JsonNode record : input) {
        String topic = record.get("topic").asText();
        if (!sources.contains(topic)) {
          continue; // a topic the query does not read
        }
        TestInputTopic<String, String> in =
            inputs.computeIfAbsent(
                topic, t -> driver.createInputTopic(t, new StringSerializer(), new StringSerializer()));
        in.pipeInput(text(record.get("key")), text(record.get("value")), record.get("timestamp").asLong());
      }
      TestOutputTopic<byte[], byte[]> output =
          driver.createOutputTopic(OUTPUT, new ByteArrayDeserializer(), new ByteArrayDeserializer());
      for (TestRecord<byte[], byte[]> record : output.readRecordsToList()) {
        ObjectNode line = JSON.createObjectNode();
        line.put("key", utf8(record.key()));
        line.put("value", utf8(record.value()));
        line.put("timestamp", record.timestamp());
        writer.write(JSON.writeValueAsString(line));
        writer.newLine();
      }
    } finally {
      try (Stream<Path> paths = Files.walk(stateDir)) {
        paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  /** The topics a topology reads: its sources' and its global stores'. */
  static Set<String> sourceTopics(Topology topology) {
    Set<String> topics = new HashSet<>();
    TopologyDescription description = topology.describe();
    for (TopologyDescription.Subtopology sub : description.subtopologies()) {
      for (TopologyDescription.Node node : sub.nodes()) {
        if (node instanceof TopologyDescription.Source source) {
          topics.addAll(source.topicSet());
        }
      }
    }
    for (TopologyDescription.GlobalStore store : description.globalStores()) {
      topics.addAll(store.source().topicSet());
    }
    return topics;
  }

  private static String text(JsonNode node) {
    return node == null || node.isNull() ? null : node.asText();
  }

  private static String utf8(byte[] bytes) {
    return bytes == null ? null : new String(bytes, StandardCharsets.UTF_8);
  }
}
