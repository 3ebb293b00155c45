package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import dev.fluvial.reference.nexmark.Model.WindowKey;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
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
 * Nexmark q7, highest bid (fluvial.bench.nexmark.queries.q7): per-auction maxima in tumbling
 * windows emitted when each window closes, then the highest bids per window.
 */
public final class Q7 {
  private static final Comparator<Q0.Row> ORDER =
      Comparator.comparingLong(Q0.Row::auction)
          .thenComparingLong(Q0.Row::dateTime)
          .thenComparingLong(Q0.Row::bidder)
          .thenComparing(Q0.Row::extra);

  private Q7() {}

  /** The highest-priced bids seen, sorted by auction, time, bidder and extra. */
  public record Top(List<Q0.Row> bids, long price) {
    Top merge(List<Q0.Row> more, long morePrice) {
      if (morePrice < price) {
        return this;
      }
      List<Q0.Row> all = new ArrayList<>(more);
      if (morePrice == price) {
        all.addAll(bids);
      }
      all.sort(ORDER);
      return new Top(all, morePrice);
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .groupByKey()
        .windowedBy(TimeWindows.ofSizeAndGrace(Duration.ofSeconds(10), Duration.ofSeconds(1)))
        .emitStrategy(EmitStrategy.onWindowClose())
        .aggregate(
            () -> new Top(List.of(), -1),
            (auction, bid, top) -> top.merge(List.of(Q0.Row.of(bid)), bid.price()),
            Materialized.with(Serdes.String(), Json.serde(Top.class)))
        .toStream()
        .map(
            (windowed, top) ->
                KeyValue.pair(new WindowKey(windowed.window().end(), windowed.window().start()), top))
        .groupByKey(Grouped.with(Json.serde(WindowKey.class), Json.serde(Top.class)))
        .aggregate(
            () -> new Top(List.of(), -1),
            (window, auctionTop, top) -> top.merge(auctionTop.bids(), auctionTop.price()),
            Materialized.with(Json.serde(WindowKey.class), Json.serde(Top.class)))
        .toStream()
        .to(output, Produced.with(Json.serde(WindowKey.class), Json.serde(Top.class)));
  }
}
