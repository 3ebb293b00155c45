package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.TimeWindows;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.processor.WallclockTimestampExtractor;

/**
 * Nexmark q12, processing-time windows (fluvial.bench.nexmark.queries.q12): bids per bidder per
 * 10 s of wall clock, the bid source timed by {@link WallclockTimestampExtractor}.
 */
public final class Q12 {
  static final Duration WINDOW = Duration.ofSeconds(10);
  static final Duration GRACE = Duration.ofSeconds(10);

  private Q12() {}

  /** A bidder's window: the output key. */
  public record BidderWindow(long bidder, long end, long start) {}

  public record Row(long bidder, long bid_count, long starttime, long endtime) {}

  static KeyValue<BidderWindow, Row> row(Windowed<Long> window, Long count) {
    long bidder = window.key();
    long start = window.window().start();
    long end = window.window().end();
    return KeyValue.pair(new BidderWindow(bidder, end, start), new Row(bidder, count, start, end));
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(
            topics.get("bid"),
            Consumed.with(Serdes.String(), Json.serde(Bid.class))
                .withTimestampExtractor(new WallclockTimestampExtractor()))
        .map((auction, bid) -> KeyValue.pair(bid.bidder(), bid.auction()))
        .groupByKey(Grouped.with(Serdes.Long(), Serdes.Long()))
        .windowedBy(TimeWindows.ofSizeAndGrace(WINDOW, GRACE))
        .count(Materialized.with(Serdes.Long(), Serdes.Long()))
        .toStream()
        .map(Q12::row)
        .to(output, Produced.with(Json.serde(BidderWindow.class), Json.serde(Row.class)));
  }
}
