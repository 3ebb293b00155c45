package dev.fluvial.reference;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
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
 * <p>The app stops by itself once it has consumed everything: in every partition of its input
 * and of its repartition topics, no committed record lies at or past the offset its consumer
 * group committed, and that holds twice in a row with the same offsets (a repartition topic is
 * looked at before the input it is fed from may have been, so one look could be stale). It then
 * closes cleanly (a final commit) and exits 0. SIGTERM closes it the same way early; a failure
 * of the Streams client exits 1.
 */
public final class ReferenceApp {
  private static final long POLL_MS = 200;
  // StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_OUTER_JOIN_SPURIOUS_RESULTS_FIX
  public static final String EMIT_INTERVAL_OUTER_JOIN =
      "__emit.interval.ms.kstreams.outer.join.spurious.results.fix__";
  // StreamsConfig.InternalConfig.EMIT_INTERVAL_MS_KSTREAMS_WINDOWED_AGGREGATION
  public static final String EMIT_INTERVAL_WINDOWED_AGGREGATION =
      "__emit.interval.ms.kstreams.windowed.aggregation__";

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
    try (Admin admin = Admin.create(adminConfig(bootstrap));
        KafkaConsumer<byte[], byte[]> reader = new KafkaConsumer<>(readerConfig(bootstrap))) {
      ok = runUntilDone(streams, admin, reader, applicationId, input, failed, stopRequested);
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
    // Aggregations that emit on window close have the same kind of interval.
    props.put(EMIT_INTERVAL_OUTER_JOIN, 0L);
    props.put(EMIT_INTERVAL_WINDOWED_AGGREGATION, 0L);
    return props;
  }

  public static Properties adminConfig(String bootstrap) {
    Properties props = new Properties();
    props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    return props;
  }

  public static Properties readerConfig(String bootstrap) {
    Properties props = new Properties();
    props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
    props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
    props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class);
    return props;
  }

  /** Waits until the app has consumed everything (see the class comment); false on failure. */
  private static boolean runUntilDone(
      KafkaStreams streams,
      Admin admin,
      KafkaConsumer<byte[], byte[]> reader,
      String applicationId,
      String input,
      CountDownLatch failed,
      CountDownLatch stopRequested)
      throws InterruptedException {
    Map<TopicPartition, Long> previous = null;
    while (stopRequested.getCount() > 0) {
      if (failed.await(POLL_MS, TimeUnit.MILLISECONDS)
          || streams.state() == KafkaStreams.State.ERROR) {
        System.err.println("reference app failed: Kafka Streams is in state " + streams.state());
        return false;
      }
      Map<TopicPartition, Long> consumed =
          consumedEverything(admin, reader, applicationId, List.of(input));
      if (consumed != null && consumed.equals(previous)) {
        return true;
      }
      previous = consumed;
    }
    return true;
  }

  /**
   * The group's committed offsets if no committed record lies at or past them in any partition
   * the app reads (its inputs, its repartition topics and the subscription topics of its
   * foreign-key joins); null while one does, or if unsure.
   */
  public static Map<TopicPartition, Long> consumedEverything(
      Admin admin,
      KafkaConsumer<byte[], byte[]> reader,
      String applicationId,
      Collection<String> inputs) {
    try {
      List<TopicPartition> partitions = new ArrayList<>();
      for (String topic : admin.listTopics().names().get()) {
        boolean internal =
            topic.startsWith(applicationId + "-")
                && (topic.endsWith("-repartition") || topic.endsWith("-topic"));
        if (inputs.contains(topic) || internal) {
          for (PartitionInfo info : reader.partitionsFor(topic)) {
            partitions.add(new TopicPartition(topic, info.partition()));
          }
        }
      }
      Map<TopicPartition, OffsetAndMetadata> committed =
          admin.listConsumerGroupOffsets(applicationId).partitionsToOffsetAndMetadata().get();
      Map<TopicPartition, Long> beginnings = reader.beginningOffsets(partitions);
      // read_committed: the last stable offset, past which nothing is committed yet.
      Map<TopicPartition, Long> ends = reader.endOffsets(partitions);
      Map<TopicPartition, Long> offsets = new HashMap<>();
      for (TopicPartition tp : partitions) {
        OffsetAndMetadata offset = committed.get(tp);
        long from = offset == null ? beginnings.get(tp) : offset.offset();
        offsets.put(tp, from);
        if (from < ends.get(tp) && hasRecordFrom(reader, tp, from, ends.get(tp))) {
          return null;
        }
      }
      return offsets;
    } catch (ExecutionException | KafkaException e) {
      return null; // the group or a topic may not exist yet: not done
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return null;
    }
  }

  /**
   * Whether a committed record lies in [from, end) of the partition. Between the two there may be
   * only transaction markers, which a read_committed consumer skips without returning a record.
   */
  private static boolean hasRecordFrom(
      KafkaConsumer<byte[], byte[]> reader, TopicPartition tp, long from, long end) {
    reader.assign(List.of(tp));
    reader.seek(tp, from);
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (reader.position(tp) < end) {
      if (!reader.poll(Duration.ofMillis(POLL_MS)).isEmpty()) {
        return true;
      }
      if (System.nanoTime() > deadline) {
        return true; // could not read it: count it as not done, and look again
      }
    }
    return false;
  }

  public static void deleteRecursively(Path dir) {
    try (Stream<Path> paths = Files.walk(dir)) {
      paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      System.err.println("could not delete " + dir + ": " + e);
    }
  }
}
