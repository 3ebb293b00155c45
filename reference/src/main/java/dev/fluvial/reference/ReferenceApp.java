package dev.fluvial.reference;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * Runs one reference topology on Kafka Streams until its input is fully processed, then exits.
 *
 * <pre>
 * java -jar fluvial-reference.jar TOPOLOGY BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC APPLICATION_ID
 * java -jar fluvial-reference.jar --list
 * </pre>
 *
 * <p>The settings are those the differential tests give fluvial: exactly-once v2, the record cache
 * off (so every update is a revision on the output topic) and a short commit interval.
 *
 * <p>The app stops by itself once its consumer group has committed the input topic's end offsets
 * and no record has been processed for {@code -Dreference.idle.ms} (default 2000): by then the
 * repartition topics, whose records only become visible after a commit, are drained too. It then
 * closes cleanly (a final commit) and exits 0. SIGTERM closes it the same way early; a failure
 * of the Streams client exits 1.
 */
public final class ReferenceApp {
  private static final long POLL_MS = 200;
  // StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX
  private static final String EMIT_INTERVAL_OUTER_JOIN =
      "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__";

  private ReferenceApp() {}

  public static void main(String[] args) throws Exception {
    if (args.length == 1 && args[0].equals("--list")) {
      Topologies.ALL.keySet().forEach(System.out::println);
      return;
    }
    if (args.length != 5 || !Topologies.ALL.containsKey(args[0])) {
      System.err.println(
          "usage: ReferenceApp TOPOLOGY BOOTSTRAP INPUT_TOPIC OUTPUT_TOPIC APPLICATION_ID\n"
              + "topologies: "
              + String.join(", ", Topologies.ALL.keySet()));
      System.exit(2);
    }
    String name = args[0];
    String bootstrap = args[1];
    String input = args[2];
    String output = args[3];
    String applicationId = args[4];
    long idleMs = Long.getLong("reference.idle.ms", 2_000);

    StreamsBuilder builder = new StreamsBuilder();
    Topologies.ALL.get(name).build(builder, input, output);
    Topology topology = builder.build();

    Path stateDir = Files.createTempDirectory("fluvial-reference-");
    KafkaStreams streams = new KafkaStreams(topology, config(bootstrap, applicationId, stateDir));
    CountDownLatch failed = new CountDownLatch(1);
    streams.setUncaughtExceptionHandler(
        error -> {
          error.printStackTrace();
          failed.countDown();
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
    CountDownLatch stopRequested = new CountDownLatch(1);
    Thread closer =
        new Thread(
            () -> {
              stopRequested.countDown();
              streams.close(Duration.ofSeconds(30));
              deleteRecursively(stateDir);
            });
    Runtime.getRuntime().addShutdownHook(closer);

    streams.start();
    boolean ok;
    try (Admin admin = Admin.create(adminConfig(bootstrap))) {
      ok = runUntilIdle(streams, admin, applicationId, input, idleMs, failed, stopRequested);
    }
    if (stopRequested.getCount() == 0) {
      return; // SIGTERM: the shutdown hook closes the client.
    }
    streams.close(Duration.ofSeconds(30));
    Runtime.getRuntime().removeShutdownHook(closer);
    deleteRecursively(stateDir);
    System.exit(ok ? 0 : 1);
  }

  private static Properties config(String bootstrap, String applicationId, Path stateDir) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    // Caching off: each update reaches the output as its own revision, as in fluvial's run.
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    // Left and outer stream-stream joins emit records that found no partner when their window
    // closes, but Kafka Streams checks for closed windows at most once per this interval of
    // wall-clock time (1 s by default), which makes its output depend on processing speed.
    // fluvial checks on every record; an interval of 0 does the same, so the outputs compare.
    props.put(EMIT_INTERVAL_OUTER_JOIN, 0L);
    return props;
  }

  private static Properties adminConfig(String bootstrap) {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    return props;
  }

  /** Waits until the input is committed and processing has been idle; false on failure. */
  private static boolean runUntilIdle(
      KafkaStreams streams,
      Admin admin,
      String applicationId,
      String input,
      long idleMs,
      CountDownLatch failed,
      CountDownLatch stopRequested)
      throws InterruptedException {
    double lastProcessed = -1;
    long quietSince = System.nanoTime();
    while (stopRequested.getCount() > 0) {
      if (failed.await(POLL_MS, TimeUnit.MILLISECONDS)
          || streams.state() == KafkaStreams.State.ERROR) {
        System.err.println("reference app failed: Kafka Streams is in state " + streams.state());
        return false;
      }
      double processed = processedRecords(streams);
      boolean committed = inputCommitted(admin, applicationId, input);
      if (processed != lastProcessed || !committed) {
        lastProcessed = processed;
        quietSince = System.nanoTime();
      } else if (System.nanoTime() - quietSince >= TimeUnit.MILLISECONDS.toNanos(idleMs)) {
        return true;
      }
    }
    return true;
  }

  /** Records processed by every stream thread so far (thread-level "process-total"). */
  private static double processedRecords(KafkaStreams streams) {
    return streams.metrics().entrySet().stream()
        .filter(e -> e.getKey().group().equals("stream-thread-metrics"))
        .filter(e -> e.getKey().name().equals("process-total"))
        .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue())
        .sum();
  }

  /** Whether the application's group has committed the end offset of every input partition. */
  private static boolean inputCommitted(Admin admin, String applicationId, String input) {
    try {
      List<TopicPartition> partitions =
          admin.describeTopics(List.of(input)).allTopicNames().get().get(input).partitions()
              .stream()
              .map(p -> new TopicPartition(input, p.partition()))
              .collect(Collectors.toList());
      Map<TopicPartition, OffsetAndMetadata> committed =
          admin.listConsumerGroupOffsets(applicationId).partitionsToOffsetAndMetadata().get();
      Map<TopicPartition, OffsetSpec> latest =
          partitions.stream().collect(Collectors.toMap(tp -> tp, tp -> OffsetSpec.latest()));
      var ends = admin.listOffsets(latest).all().get();
      for (TopicPartition tp : partitions) {
        OffsetAndMetadata offset = committed.get(tp);
        long end = ends.get(tp).offset();
        if (end > 0 && (offset == null || offset.offset() < end)) {
          return false;
        }
      }
      return true;
    } catch (ExecutionException e) {
      return false; // the group may not exist yet: not committed
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  private static void deleteRecursively(Path dir) {
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      System.err.println("could not delete " + dir + ": " + e);
    }
  }
}
