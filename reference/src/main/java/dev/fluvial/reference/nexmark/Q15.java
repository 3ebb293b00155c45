package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q15, bidding statistics per day (fluvial.bench.nexmark.queries.q15), its distinct
 * counts as two aggregations: bids per rank of each (day, bidder) and (day, auction) fact key,
 * then those rows added to and subtracted from the day's statistics.
 */
public final class Q15 {
  private Q15() {}

  /** A fact key's bids per price rank. */
  public record Ranks(long rank1, long rank2, long rank3) {
    static final Ranks NONE = new Ranks(0, 0, 0);

    Ranks plus(int rank) {
      return new Ranks(
          rank1 + (rank == 0 ? 1 : 0), rank2 + (rank == 1 ? 1 : 0), rank3 + (rank == 2 ? 1 : 0));
    }
  }

  /** A fact row regrouped by day: its kind ("B" a bidder, "A" an auction) and its ranks. */
  public record Fact(String kind, long rank1, long rank2, long rank3) {}

  /**
   * The twelve counts (total, rank 1, 2, 3 of bids, then of bidders, then of auctions) with a
   * fact row added (sign 1) or taken out (sign -1). A new fact key's old row is the
   * initializer's (no bids, as Kafka Streams forwards it): it counts for nothing.
   */
  static long[] count(long[] columns, String kind, long r1, long r2, long r3, int sign) {
    long[] c = columns.clone();
    int at;
    if (kind.equals("B")) {
      c[0] += sign * (r1 + r2 + r3);
      c[1] += sign * r1;
      c[2] += sign * r2;
      c[3] += sign * r3;
      at = 4;
    } else {
      at = 8;
    }
    c[at] += r1 + r2 + r3 > 0 ? sign : 0;
    c[at + 1] += r1 > 0 ? sign : 0;
    c[at + 2] += r2 > 0 ? sign : 0;
    c[at + 3] += r3 > 0 ? sign : 0;
    return c;
  }

  public record Stats(
      String day,
      long total_bids,
      long rank1_bids,
      long rank2_bids,
      long rank3_bids,
      long total_bidders,
      long rank1_bidders,
      long rank2_bidders,
      long rank3_bidders,
      long total_auctions,
      long rank1_auctions,
      long rank2_auctions,
      long rank3_auctions) {
    static final Stats NONE = of(null, new long[12]);

    static Stats of(String day, long[] c) {
      return new Stats(
          day, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10], c[11]);
    }

    long[] columns() {
      return new long[] {
        total_bids, rank1_bids, rank2_bids, rank3_bids,
        total_bidders, rank1_bidders, rank2_bidders, rank3_bidders,
        total_auctions, rank1_auctions, rank2_auctions, rank3_auctions
      };
    }

    Stats change(String day, Fact fact, int sign) {
      return of(
          day, count(columns(), fact.kind(), fact.rank1(), fact.rank2(), fact.rank3(), sign));
    }
  }

  static List<KeyValue<String, Integer>> facts(String auction, Bid bid) {
    String day = Columns.day(bid.dateTime());
    int rank = Columns.priceRank(bid.price());
    return List.of(
        KeyValue.pair(day + "|B|" + bid.bidder(), rank),
        KeyValue.pair(day + "|A|" + bid.auction(), rank));
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .flatMap(Q15::facts)
        .groupByKey(Grouped.with(Serdes.String(), Serdes.Integer()))
        .aggregate(
            () -> Ranks.NONE,
            (key, rank, ranks) -> ranks.plus(rank),
            Materialized.with(Serdes.String(), Json.serde(Ranks.class)))
        .groupBy(
            (key, ranks) ->
                KeyValue.pair(
                    key.substring(0, 10),
                    new Fact(key.substring(11, 12), ranks.rank1(), ranks.rank2(), ranks.rank3())),
            Grouped.with(Serdes.String(), Json.serde(Fact.class)))
        .aggregate(
            () -> Stats.NONE,
            (day, fact, stats) -> stats.change(day, fact, 1),
            (day, fact, stats) -> stats.change(day, fact, -1),
            Materialized.with(Serdes.String(), Json.serde(Stats.class)))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Json.serde(Stats.class)));
  }
}
