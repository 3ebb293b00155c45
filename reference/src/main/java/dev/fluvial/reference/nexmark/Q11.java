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
import org.apache.kafka.streams.kstream.SessionWindows;
import org.apache.kafka.streams.kstream.Windowed;

/**
 * Nexmark q11, user sessions (fluvial.bench.nexmark.queries.q11): bids per bidder per session
 * of a 10 s inactivity gap.
 */
public final class Q11 {
  static final Duration GAP = Duration.ofSeconds(10);
  static final Duration GRACE = Duration.ofSeconds(30);

  private Q11() {}

  /** A bidder's session, by its first and last bid: the output key. */
  public record Session(long bidder, long end, long start) {}

  public record Row(long bidder, long bid_count, long starttime, long endtime) {}

  static KeyValue<Session, Row> row(Windowed<Long> session, Long count) {
    long bidder = session.key();
    long start = session.window().start();
    long end = session.window().end();
    Session key = new Session(bidder, end, start);
    if (count == null) { // a session merged into another one
      return KeyValue.pair(key, null);
    }
    // The SQL's SESSION_END: the last bid plus the gap.
    return KeyValue.pair(key, new Row(bidder, count, start, end + GAP.toMillis()));
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        // Only the bidder counts: the repartition carries no more than it needs.
        .map((auction, bid) -> KeyValue.pair(bid.bidder(), bid.auction()))
        .groupByKey(Grouped.with(Serdes.Long(), Serdes.Long()))
        .windowedBy(SessionWindows.ofInactivityGapAndGrace(GAP, GRACE))
        .count(Materialized.with(Serdes.Long(), Serdes.Long()))
        .toStream()
        .map(Q11::row)
        .to(output, Produced.with(Json.serde(Session.class), Json.serde(Row.class)));
  }
}
