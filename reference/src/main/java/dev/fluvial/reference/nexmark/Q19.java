package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q19, auction top 10 (fluvial.bench.nexmark.queries.q19): each auction's ten highest
 * bids with their rank_number, equal prices in arrival order, as one list per auction.
 */
public final class Q19 {
  static final int TOP = 10;

  private Q19() {}

  public record Ranked(
      long auction,
      long bidder,
      long price,
      String channel,
      String url,
      long dateTime,
      String extra,
      long rank_number) {
    static Ranked of(Bid bid, long rank) {
      return new Ranked(
          bid.auction(), bid.bidder(), bid.price(), bid.channel(), bid.url(), bid.dateTime(),
          bid.extra(), rank);
    }

    Ranked demoted() {
      return new Ranked(auction, bidder, price, channel, url, dateTime, extra, rank_number + 1);
    }
  }

  /** The top list as it is stored and written: a JSON array of the ranked bids. */
  public static final class Top extends ArrayList<Ranked> {
    public Top() {}

    Top(List<Ranked> ranked) {
      super(ranked);
    }
  }

  static Top enter(Bid bid, Top top) {
    long price = bid.price();
    int size = top.size();
    if (size >= TOP && price <= top.get(size - 1).price()) {
      return top;
    }
    int at = size;
    while (at > 0 && top.get(at - 1).price() < price) {
      at--; // after every bid of an equal price
    }
    Top ranked = new Top(top.subList(0, at));
    ranked.add(Ranked.of(bid, at + 1));
    for (int i = at; i < Math.min(size, TOP - 1); i++) {
      ranked.add(top.get(i).demoted());
    }
    return ranked;
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .groupByKey(Grouped.with(Serdes.String(), Json.serde(Bid.class)))
        .aggregate(
            Top::new,
            (auction, bid, top) -> enter(bid, top),
            Materialized.with(Serdes.String(), Json.serde(Top.class)))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Json.serde(Top.class)));
  }
}
