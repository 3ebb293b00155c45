package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q17, auction statistics per day (fluvial.bench.nexmark.queries.q17): per (auction,
 * day), bids per price rank and the min, max, integer average and sum of the prices.
 */
public final class Q17 {
  private Q17() {}

  /** The output key. */
  public record AuctionDay(long auction, String day) {}

  public record Row(
      long auction,
      String day,
      long total_bids,
      long rank1_bids,
      long rank2_bids,
      long rank3_bids,
      long min_price,
      long max_price,
      long avg_price,
      long sum_price) {
    static final Row NONE = new Row(0, null, 0, 0, 0, 0, 0, 0, 0, 0);

    Row add(AuctionDay group, long price) {
      int rank = Columns.priceRank(price);
      long total = total_bids + 1;
      long sum = sum_price + price;
      return new Row(
          group.auction(),
          group.day(),
          total,
          rank1_bids + (rank == 0 ? 1 : 0),
          rank2_bids + (rank == 1 ? 1 : 0),
          rank3_bids + (rank == 2 ? 1 : 0),
          total_bids == 0 ? price : Math.min(min_price, price),
          total_bids == 0 ? price : Math.max(max_price, price),
          sum / total,
          sum);
    }
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .map(
            (auction, bid) ->
                KeyValue.pair(
                    new AuctionDay(bid.auction(), Columns.day(bid.dateTime())), bid.price()))
        .groupByKey(Grouped.with(Json.serde(AuctionDay.class), Serdes.Long()))
        .aggregate(
            () -> Row.NONE,
            (group, price, row) -> row.add(group, price),
            Materialized.with(Json.serde(AuctionDay.class), Json.serde(Row.class)))
        .toStream()
        .to(output, Produced.with(Json.serde(AuctionDay.class), Json.serde(Row.class)));
  }
}
