package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q14, calculation (fluvial.bench.nexmark.queries.q14): bids with 0.908 * price in
 * (1,000,000, 50,000,000), the price as exact decimal text, a time-of-day type and the count of
 * 'c' in extra.
 */
public final class Q14 {
  static final long FACTOR_THOUSANDTHS = 908;
  static final long LOW_THOUSANDTHS = 1_000_000L * 1000;
  static final long HIGH_THOUSANDTHS = 50_000_000L * 1000;

  private Q14() {}

  public record Row(
      long auction,
      long bidder,
      String price,
      String bidTimeType,
      long dateTime,
      String extra,
      long c_counts) {}

  static boolean inBand(Bid bid) {
    long thousandths = FACTOR_THOUSANDTHS * bid.price();
    return LOW_THOUSANDTHS < thousandths && thousandths < HIGH_THOUSANDTHS;
  }

  static String bidTimeType(long dateTimeMs) {
    int h = Columns.hour(dateTimeMs);
    if (h >= 8 && h <= 18) {
      return "dayTime";
    }
    if (h <= 6 || h >= 20) {
      return "nightTime";
    }
    return "otherTime";
  }

  static Row row(Bid bid) {
    long thousandths = FACTOR_THOUSANDTHS * bid.price();
    long fraction = thousandths % 1000;
    String price =
        (thousandths / 1000) + (fraction < 10 ? ".00" : fraction < 100 ? ".0" : ".") + fraction;
    String extra = bid.extra();
    long cCounts = 0;
    for (int i = 0; i < extra.length(); i++) {
      if (extra.charAt(i) == 'c') {
        cCounts++;
      }
    }
    return new Row(
        bid.auction(), bid.bidder(), price, bidTimeType(bid.dateTime()), bid.dateTime(), extra,
        cCounts);
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .filter((auction, bid) -> inBand(bid))
        .mapValues(Q14::row)
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
