package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.ReferenceApp;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyDescription;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;

/**
 * Runs Nexmark queries as Kafka Streams applications until their input is fully processed.
 *
 * <pre>
 * java -cp fluvial-reference.jar dev.fluvial.reference.nexmark.NexmarkMain \
 *     QUERY BOOTSTRAP PREFIX OUTPUT APPLICATION_ID GUARANTEE COMMIT_INTERVAL_MS CACHE_BYTES
 * </pre>
 *
 * <p>QUERY is a query name (q0, q1, ...) or several, comma-separated: each then runs as its own
 * application in this JVM, its output topic and application id suffixed with "-" and its name.
 * The inputs are PREFIX-person, PREFIX-auction and PREFIX-bid; GUARANTEE is exactly_once_v2 or
 * at_least_once; CACHE_BYTES is statestore.cache.max.bytes (0: every update is a revision).
 *
 * <p>One stream thread per application, Kafka Streams' defaults otherwise. With
 * {@code -Dnexmark.exact=true} (comparisons), windowed aggregations that emit on window close
 * check for closed windows on every record, as in ReferenceApp: by default the check runs at
 * most once per second of wall-clock time, so which windows the end of the input closes would
 * depend on processing speed.
 *
 * <p>Like ReferenceApp, each application stops once it has consumed everything (no committed
 * record at or past its committed offsets in its inputs and internal topics, twice in a row),
 * closes cleanly and the JVM exits 0; SIGTERM closes them early; a failure exits 1.
 */
public final class NexmarkMain {
  private static final long POLL_MS = 200;

  private NexmarkMain() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 8) {
      System.err.println(
          "usage: NexmarkMain QUERY[,QUERY...] BOOTSTRAP PREFIX OUTPUT APPLICATION_ID GUARANTEE"
              + " COMMIT_INTERVAL_MS CACHE_BYTES\nqueries: "
              + String.join(", ", Queries.ALL.keySet()));
      System.exit(2);
    }
    List<String> names = List.of(args[0].split(","));
    for (String name : names) {
      if (!Queries.ALL.containsKey(name)) {
        System.err.println("unknown query " + name + ": use " + Queries.ALL.keySet());
        System.exit(2);
      }
    }
    String bootstrap = args[1];
    Map<String, String> topics = Model.topics(args[2]);
    String guarantee = args[5];
    if (!guarantee.equals(StreamsConfig.EXACTLY_ONCE_V2)
        && !guarantee.equals(StreamsConfig.AT_LEAST_ONCE)) {
      System.err.println("GUARANTEE must be exactly_once_v2 or at_least_once, got " + guarantee);
      System.exit(2);
    }
    long commitMs = Long.parseLong(args[6]);
    long cacheBytes = Long.parseLong(args[7]);

    List<Run> runs = new ArrayList<>();
    for (String name : names) {
      boolean several = names.size() > 1;
      String output = several ? args[3] + "-" + name : args[3];
      String applicationId = several ? args[4] + "-" + name : args[4];
      StreamsBuilder builder = new StreamsBuilder();
      Queries.ALL.get(name).build(builder, topics, output);
      Path stateDir = Files.createTempDirectory("fluvial-nexmark-");
      Properties props = new Properties();
      props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
      props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
      props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
      props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitMs);
      props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, cacheBytes);
      props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
      props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
      if (Boolean.getBoolean("nexmark.exact")) {
        props.put(ReferenceApp.EMIT_INTERVAL_WINDOWED_AGGREGATION, 0L);
        props.put(ReferenceApp.EMIT_INTERVAL_OUTER_JOIN, 0L);
      }
      Topology topology = builder.build();
      runs.add(
          new Run(
              name, applicationId, new KafkaStreams(topology, props), stateDir, inputs(topology)));
    }

    CountDownLatch failed = new CountDownLatch(1);
    CountDownLatch stopRequested = new CountDownLatch(1);
    for (Run run : runs) {
      run.streams.setUncaughtExceptionHandler(
          error -> {
            error.printStackTrace();
            failed.countDown();
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
          });
    }
    Thread closer =
        new Thread(
            () -> {
              stopRequested.countDown();
              closeAll(runs);
            });
    Runtime.getRuntime().addShutdownHook(closer);
    runs.forEach(run -> run.streams.start());

    boolean ok;
    try (Admin admin = Admin.create(ReferenceApp.adminConfig(bootstrap));
        KafkaConsumer<byte[], byte[]> reader =
            new KafkaConsumer<>(ReferenceApp.readerConfig(bootstrap));
        KafkaConsumer<byte[], byte[]> watcher = new KafkaConsumer<>(watcherConfig(bootstrap))) {
      ok = runUntilDone(runs, admin, reader, watcher, failed, stopRequested);
    }
    if (stopRequested.getCount() == 0) {
      return; // SIGTERM: the shutdown hook closes the applications.
    }
    closeAll(runs);
    Runtime.getRuntime().removeShutdownHook(closer);
    System.exit(ok ? 0 : 1);
  }

  private record Run(
      String name,
      String applicationId,
      KafkaStreams streams,
      Path stateDir,
      Set<String> inputs) {}

  /** The user topics a topology's stream tasks read (its source topics, internal ones aside). */
  private static Set<String> inputs(Topology topology) {
    Set<String> topics = new TreeSet<>();
    for (TopologyDescription.Subtopology sub : topology.describe().subtopologies()) {
      for (TopologyDescription.Node node : sub.nodes()) {
        if (node instanceof TopologyDescription.Source source) {
          topics.addAll(source.topicSet());
        }
      }
    }
    // Repartition and subscription topics are the application's own: looked at separately.
    topics.removeIf(t -> t.endsWith("-repartition") || t.endsWith("-topic"));
    return topics;
  }

  private static void closeAll(List<Run> runs) {
    for (Run run : runs) {
      run.streams.close(Duration.ofSeconds(30));
      ReferenceApp.deleteRecursively(run.stateDir);
    }
  }

  private static Properties watcherConfig(String bootstrap) {
    Properties props = ReferenceApp.readerConfig(bootstrap);
    props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted");
    return props;
  }

  /**
   * Whether a transaction of the application is open: some partition of its internal topics has
   * records past its last stable offset. An open transaction hides what it wrote and consumed, so
   * offsets that stand still while one is open say nothing.
   */
  private static boolean transactionOpen(
      Admin admin,
      KafkaConsumer<byte[], byte[]> reader,
      KafkaConsumer<byte[], byte[]> watcher,
      String applicationId) {
    try {
      List<TopicPartition> partitions = new ArrayList<>();
      for (String topic : admin.listTopics().names().get()) {
        if (topic.startsWith(applicationId + "-")) {
          for (PartitionInfo info : reader.partitionsFor(topic)) {
            partitions.add(new TopicPartition(topic, info.partition()));
          }
        }
      }
      Map<TopicPartition, Long> stable = reader.endOffsets(partitions);
      Map<TopicPartition, Long> high = watcher.endOffsets(partitions);
      for (TopicPartition tp : partitions) {
        if (high.get(tp) > stable.get(tp)) {
          return true;
        }
      }
      return false;
    } catch (Exception e) {
      return true; // unsure: not done, look again
    }
  }

  /** Waits until every application has consumed everything; false on a failure. */
  private static boolean runUntilDone(
      List<Run> runs,
      Admin admin,
      KafkaConsumer<byte[], byte[]> reader,
      KafkaConsumer<byte[], byte[]> watcher,
      CountDownLatch failed,
      CountDownLatch stopRequested)
      throws InterruptedException {
    List<Run> pending = new ArrayList<>(runs);
    Map<String, Map<TopicPartition, Long>> previous = new java.util.HashMap<>();
    while (stopRequested.getCount() > 0 && !pending.isEmpty()) {
      if (failed.await(POLL_MS, TimeUnit.MILLISECONDS)) {
        return false;
      }
      for (Run run : List.copyOf(pending)) {
        if (run.streams.state() == KafkaStreams.State.ERROR) {
          System.err.println("nexmark " + run.name + " failed: Kafka Streams is in state ERROR");
          return false;
        }
        Map<TopicPartition, Long> consumed =
            ReferenceApp.consumedEverything(admin, reader, run.applicationId, run.inputs);
        if (consumed != null && transactionOpen(admin, reader, watcher, run.applicationId)) {
          consumed = null; // what it wrote and consumed is hidden until it commits
        }
        if (consumed != null && consumed.equals(previous.get(run.name))) {
          pending.remove(run);
        }
        previous.put(run.name, consumed);
      }
    }
    return true;
  }
}
