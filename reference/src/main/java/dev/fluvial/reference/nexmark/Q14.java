package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q14, calculation: bids with 0.908 * price in (1,000,000, 50,000,000), the price as
 * exact decimal text, a time-of-day type and the count of 'c' in extra (see queries/q14.py).
 */
public final class Q14 {
  static final long FACTOR_THOUSANDTHS = 908;
  static final long LOW_THOUSANDTHS = 1_000_000L * 1000;
  static final long HIGH_THOUSANDTHS = 50_000_000L * 1000;

  private Q14() {}

  static boolean inBand(JsonNode bid) {
    long thousandths = FACTOR_THOUSANDTHS * bid.get("price").asLong();
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

  static JsonNode row(JsonNode bid) {
    long thousandths = FACTOR_THOUSANDTHS * bid.get("price").asLong();
    long fraction = thousandths % 1000;
    String price =
        (thousandths / 1000) + (fraction < 10 ? ".00" : fraction < 100 ? ".0" : ".") + fraction;
    String extra = bid.get("extra").asText();
    long cCounts = extra.chars().filter(c -> c == 'c').count();
    long dateTime = bid.get("dateTime").asLong();
    return Columns.object()
        .put("auction", bid.get("auction").asLong())
        .put("bidder", bid.get("bidder").asLong())
        .put("price", price)
        .put("bidTimeType", bidTimeType(dateTime))
        .put("dateTime", dateTime)
        .put("extra", extra)
        .put("c_counts", cCounts);
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .filter((auction, bid) -> inBand(bid))
        .mapValues(Q14::row)
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
