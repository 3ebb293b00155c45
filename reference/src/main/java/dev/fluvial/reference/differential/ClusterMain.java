package dev.fluvial.reference.differential;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * Runs generated differential cases as real Kafka Streams applications on a Kafka cluster, many
 * at once in one JVM; the multi-partition twin of {@link DifferentialMain}.
 *
 * <pre>
 * java -cp fluvial-reference.jar dev.fluvial.reference.differential.ClusterMain
 * </pre>
 *
 * <p>It serves one JSON command per stdin line and answers each with one JSON line on stdout:
 *
 * <ul>
 *   <li>{@code {"cmd": "start", "app_id", "bootstrap", "case"}} builds the case's topology with
 *       {@link CaseBuilder} and starts a {@code KafkaStreams} for it (exactly-once v2, record cache
 *       off, one stream thread); answers {@code {"app_id"}} or {@code {"app_id", "error"}};
 *   <li>{@code {"cmd": "state", "app_id"}} answers the instance's state and its error, if any;
 *   <li>{@code {"cmd": "stop", "app_id"}} closes the instance, deletes its local state and
 *       answers its state and error.
 * </ul>
 *
 * <p>The caller decides when an application has consumed its input (from the group's committed
 * offsets) and reads the output topics itself.
 */
public final class ClusterMain {
  private static final ObjectMapper JSON = new ObjectMapper();

  private static final class Instance {
    final KafkaStreams streams;
    final Path stateDir;
    volatile String error;

    Instance(KafkaStreams streams, Path stateDir) {
      this.streams = streams;
      this.stateDir = stateDir;
    }
  }

  private final Map<String, Instance> instances = new ConcurrentHashMap<>();
  private final Path stateRoot;

  private ClusterMain(Path stateRoot) {
    this.stateRoot = stateRoot;
  }

  public static void main(String[] args) throws IOException {
    Path stateRoot = Files.createTempDirectory("fluvial-differential-cluster-");
    ClusterMain main = new ClusterMain(stateRoot);
    try (BufferedReader in =
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        BufferedWriter out =
            new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8))) {
      String line;
      while ((line = in.readLine()) != null) {
        if (line.isBlank()) {
          continue;
        }
        ObjectNode answer = main.serve(JSON.readTree(line));
        out.write(JSON.writeValueAsString(answer));
        out.newLine();
        out.flush();
      }
    } finally {
      for (String appId : Map.copyOf(main.instances).keySet()) {
        main.stop(appId);
      }
      deleteTree(stateRoot);
    }
    System.exit(0);
  }

  private ObjectNode serve(JsonNode command) {
    String appId = command.get("app_id").asText();
    switch (command.get("cmd").asText()) {
      case "start":
        return start(appId, command.get("bootstrap").asText(), command.get("case"));
      case "state":
        return state(appId);
      case "stop":
        return stop(appId);
      default:
        ObjectNode answer = JSON.createObjectNode().put("app_id", appId);
        return answer.put("error", "unknown command " + command.get("cmd"));
    }
  }

  static Properties config(JsonNode testCase, String appId, String bootstrap, Path stateDir) {
    Properties props = DifferentialMain.config(testCase, stateDir);
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
    return props;
  }

  private ObjectNode start(String appId, String bootstrap, JsonNode testCase) {
    ObjectNode answer = JSON.createObjectNode().put("app_id", appId);
    try {
      StreamsBuilder builder = new StreamsBuilder();
      new CaseBuilder(builder).build(testCase);
      Path stateDir = stateRoot.resolve(appId);
      Properties props = config(testCase, appId, bootstrap, stateDir);
      KafkaStreams streams = new KafkaStreams(builder.build(props), props);
      Instance instance = new Instance(streams, stateDir);
      streams.setUncaughtExceptionHandler(
          error -> {
            instance.error = error.toString();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
          });
      instances.put(appId, instance);
      streams.start();
    } catch (Throwable error) {
      answer.put("error", error.toString());
    }
    return answer;
  }

  private ObjectNode state(String appId) {
    ObjectNode answer = JSON.createObjectNode().put("app_id", appId);
    Instance instance = instances.get(appId);
    if (instance == null) {
      return answer.put("error", "no application " + appId);
    }
    answer.put("state", instance.streams.state().toString());
    if (instance.error != null) {
      answer.put("error", instance.error);
    }
    return answer;
  }

  private ObjectNode stop(String appId) {
    ObjectNode answer = state(appId);
    Instance instance = instances.remove(appId);
    if (instance != null) {
      instance.streams.close(Duration.ofSeconds(30));
      instance.streams.cleanUp();
      deleteTree(instance.stateDir);
    }
    return answer;
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
