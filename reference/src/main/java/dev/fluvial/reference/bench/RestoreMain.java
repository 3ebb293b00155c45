package dev.fluvial.reference.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.management.OperatingSystemMXBean;
import dev.fluvial.reference.ReferenceApp;
import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.StateRestoreListener;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;

/**
 * Restores a table's store from its changelog into a fresh state directory and says how long
 * that took: the Kafka Streams side of {@code fluvial bench restore}.
 *
 * <pre>
 * java -cp fluvial-reference.jar dev.fluvial.reference.bench.RestoreMain \
 *     BOOTSTRAP INPUT APPLICATION_ID GUARANTEE PARTITIONS KEY
 * </pre>
 *
 * <p>The application is a table of INPUT (string keys and values) materialized in the RocksDB
 * store "kv", one stream thread; its changelog APPLICATION_ID-kv-changelog (PARTITIONS
 * partitions) was filled beforehand. The restore listener times the restore, from the first
 * partition's start to the last partition's end, in wall-clock time and in the CPU time of this
 * process. Once the application runs, the store answers KEY and its entries are counted. One
 * line of JSON on stdout says it all; the JVM exits 0, or 1 on a failure.
 */
public final class RestoreMain {
  public static final String STORE = "kv";

  private RestoreMain() {}

  private static long cpuNanos() {
    return ((OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  public static void main(String[] args) throws Exception {
    if (args.length != 6) {
      System.err.println(
          "usage: RestoreMain BOOTSTRAP INPUT APPLICATION_ID GUARANTEE PARTITIONS KEY");
      System.exit(2);
    }
    String bootstrap = args[0];
    String input = args[1];
    String applicationId = args[2];
    String guarantee = args[3];
    int partitions = Integer.parseInt(args[4]);
    String key = args[5];

    StreamsBuilder builder = new StreamsBuilder();
    builder.table(
        input,
        Consumed.with(Serdes.String(), Serdes.String()),
        Materialized.<String, String, KeyValueStore<Bytes, byte[]>>as(STORE));
    Path stateDir = Files.createTempDirectory("fluvial-restore-");
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, guarantee);
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toString());
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);

    AtomicLong firstStartMs = new AtomicLong(-1);
    AtomicLong firstStartCpu = new AtomicLong(-1);
    AtomicLong toRestore = new AtomicLong();
    AtomicLong restored = new AtomicLong();
    AtomicLong endMs = new AtomicLong(-1);
    AtomicLong endCpu = new AtomicLong(-1);
    CountDownLatch allEnded = new CountDownLatch(partitions);
    CountDownLatch failed = new CountDownLatch(1);

    KafkaStreams streams = new KafkaStreams(builder.build(), props);
    streams.setGlobalStateRestoreListener(
        new StateRestoreListener() {
          @Override
          public void onRestoreStart(
              TopicPartition partition, String store, long startOffset, long endOffset) {
            if (firstStartMs.compareAndSet(-1, System.currentTimeMillis())) {
              firstStartCpu.set(cpuNanos());
            }
            toRestore.addAndGet(endOffset - startOffset);
          }

          @Override
          public void onBatchRestored(
              TopicPartition partition, String store, long batchEndOffset, long numRestored) {}

          @Override
          public void onRestoreEnd(TopicPartition partition, String store, long totalRestored) {
            restored.addAndGet(totalRestored);
            if (allEnded.getCount() == 1) {
              endMs.set(System.currentTimeMillis());
              endCpu.set(cpuNanos());
            }
            allEnded.countDown();
          }
        });
    streams.setUncaughtExceptionHandler(
        error -> {
          error.printStackTrace();
          failed.countDown();
          return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });

    long startedMs = System.currentTimeMillis();
    streams.start();
    boolean ok = false;
    Map<String, Object> out = new LinkedHashMap<>();
    try {
      long deadline = System.currentTimeMillis() + 1_800_000;
      while (!allEnded.await(100, TimeUnit.MILLISECONDS)) {
        if (failed.getCount() == 0 || System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("the restore did not finish: see the log above");
        }
      }
      while (streams.state() != KafkaStreams.State.RUNNING) {
        if (failed.getCount() == 0 || System.currentTimeMillis() > deadline) {
          throw new IllegalStateException("Kafka Streams is " + streams.state() + " after its restore");
        }
        Thread.sleep(50);
      }
      ReadOnlyKeyValueStore<String, String> store =
          streams.store(
              StoreQueryParameters.fromNameAndType(STORE, QueryableStoreTypes.keyValueStore()));
      long entries = 0;
      try (KeyValueIterator<String, String> all = store.all()) {
        while (all.hasNext()) {
          KeyValue<String, String> ignored = all.next();
          entries++;
        }
      }
      out.put("started_at", startedMs / 1000.0);
      out.put("restore_started_at", firstStartMs.get() / 1000.0);
      out.put("restore_ended_at", endMs.get() / 1000.0);
      out.put("restore_cpu_s", (endCpu.get() - firstStartCpu.get()) / 1e9);
      out.put("to_restore", toRestore.get());
      out.put("restored", restored.get());
      out.put("entries", entries);
      out.put("value", store.get(key));
      ok = true;
    } finally {
      streams.close(Duration.ofSeconds(30));
      ReferenceApp.deleteRecursively(stateDir);
    }
    System.out.println(new ObjectMapper().writeValueAsString(out));
    System.exit(ok ? 0 : 1);
  }
}
