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
 * Nexmark q16, channel statistics per day (fluvial.bench.nexmark.queries.q16): q15's two
 * aggregations with the channel in both keys, and the latest minute of each (channel, day), a
 * maximum only ever added to (a fact row's minute only grows, and rows are never deleted).
 */
public final class Q16 {
  private Q16() {}

  /** A bid's fact: its price rank and the minute of its time. */
  public record BidFact(int rank, String minute) {}

  /** A fact key's bids per price rank, and the latest minute among them. */
  public record Ranks(long rank1, long rank2, long rank3, String minute) {
    static final Ranks NONE = new Ranks(0, 0, 0, "");

    Ranks plus(BidFact fact) {
      int rank = fact.rank();
      return new Ranks(
          rank1 + (rank == 0 ? 1 : 0),
          rank2 + (rank == 1 ? 1 : 0),
          rank3 + (rank == 2 ? 1 : 0),
          fact.minute().compareTo(minute) > 0 ? fact.minute() : minute);
    }
  }

  /** A fact row regrouped by channel and day, its kind ("B" or "A") kept. */
  public record Fact(String kind, long rank1, long rank2, long rank3, String minute) {}

  /** The output key. */
  public record ChannelDay(String channel, String day) {}

  public record Stats(
      String channel,
      String day,
      String minute,
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
    static final Stats NONE = of(null, null, "", new long[12]);

    static Stats of(String channel, String day, String minute, long[] c) {
      return new Stats(
          channel, day, minute, c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9],
          c[10], c[11]);
    }

    long[] columns() {
      return new long[] {
        total_bids, rank1_bids, rank2_bids, rank3_bids,
        total_bidders, rank1_bidders, rank2_bidders, rank3_bidders,
        total_auctions, rank1_auctions, rank2_auctions, rank3_auctions
      };
    }

    Stats change(ChannelDay group, Fact fact, int sign) {
      // A maximum cannot be taken out: the subtractor leaves the minute as it is.
      String latest = sign > 0 && fact.minute().compareTo(minute) > 0 ? fact.minute() : minute;
      long[] c =
          Q15.count(columns(), fact.kind(), fact.rank1(), fact.rank2(), fact.rank3(), sign);
      return of(group.channel(), group.day(), latest, c);
    }
  }

  static List<KeyValue<String, BidFact>> facts(String auction, Bid bid) {
    String day = Columns.day(bid.dateTime());
    BidFact fact = new BidFact(Columns.priceRank(bid.price()), Columns.minute(bid.dateTime()));
    return List.of(
        KeyValue.pair(day + "|B|" + bid.bidder() + "|" + bid.channel(), fact),
        KeyValue.pair(day + "|A|" + bid.auction() + "|" + bid.channel(), fact));
  }

  static KeyValue<ChannelDay, Fact> byChannelDay(String key, Ranks ranks) {
    String[] parts = key.split("\\|", 4);
    return KeyValue.pair(
        new ChannelDay(parts[3], parts[0]),
        new Fact(parts[1], ranks.rank1(), ranks.rank2(), ranks.rank3(), ranks.minute()));
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .flatMap(Q16::facts)
        .groupByKey(Grouped.with(Serdes.String(), Json.serde(BidFact.class)))
        .aggregate(
            () -> Ranks.NONE,
            (key, fact, ranks) -> ranks.plus(fact),
            Materialized.with(Serdes.String(), Json.serde(Ranks.class)))
        .groupBy(Q16::byChannelDay, Grouped.with(Json.serde(ChannelDay.class), Json.serde(Fact.class)))
        .aggregate(
            () -> Stats.NONE,
            (group, fact, stats) -> stats.change(group, fact, 1),
            (group, fact, stats) -> stats.change(group, fact, -1),
            Materialized.with(Json.serde(ChannelDay.class), Json.serde(Stats.class)))
        .toStream()
        .to(output, Produced.with(Json.serde(ChannelDay.class), Json.serde(Stats.class)));
  }
}
