package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import dev.fluvial.reference.nexmark.Model.WindowKey;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.EmitStrategy;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;

/**
 * Nexmark q5, hot items (fluvial.bench.nexmark.queries.q5): per-auction counts in hopping windows
 * emitted when each window closes, then the highest count per window and its auctions.
 */
public final class Q5 {
  private Q5() {}

  public record AuctionCount(long auction, long num) {}

  public record Hot(List<Long> auctions, long num) {
    Hot add(AuctionCount row) {
      if (row.num() > num) {
        return new Hot(List.of(row.auction()), row.num());
      }
      if (row.num() == num) {
        TreeSet<Long> all = new TreeSet<>(auctions);
        all.add(row.auction());
        return new Hot(List.copyOf(all), num);
      }
      return this;
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .groupByKey()
        .windowedBy(
            TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(1))
                .advanceBy(Duration.ofSeconds(2)))
        .emitStrategy(EmitStrategy.onWindowClose())
        .count()
        .toStream()
        .map(
            (windowed, num) ->
                KeyValue.pair(
                    new WindowKey(windowed.window().end(), windowed.window().start()),
                    new AuctionCount(Long.parseLong(windowed.key()), num)))
        .groupByKey(Grouped.with(Json.serde(WindowKey.class), Json.serde(AuctionCount.class)))
        .aggregate(
            () -> new Hot(List.of(), 0),
            (window, row, hot) -> hot.add(row),
            Materialized.with(Json.serde(WindowKey.class), Json.serde(Hot.class)))
        .toStream()
        .to(output, Produced.with(Json.serde(WindowKey.class), Json.serde(Hot.class)));
  }
}
