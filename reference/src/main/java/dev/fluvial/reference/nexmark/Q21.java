package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Bid;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q21, add channel id (fluvial.bench.nexmark.queries.q21): '0'–'3' for the four known
 * channels, else the url's channel_id parameter; bids with neither are left out.
 */
public final class Q21 {
  static final Map<String, String> KNOWN_CHANNELS =
      Map.of("apple", "0", "google", "1", "facebook", "2", "baidu", "3");
  static final Pattern CHANNEL_ID = Pattern.compile("(&|^)channel_id=([^&]*)");

  private Q21() {}

  public record Row(long auction, long bidder, long price, String channel, String channel_id) {}

  static String channelId(Bid bid) {
    String known = KNOWN_CHANNELS.get(bid.channel().toLowerCase(Locale.ROOT));
    if (known != null) {
      return known;
    }
    Matcher found = CHANNEL_ID.matcher(bid.url());
    return found.find() ? found.group(2) : null;
  }

  /** The output row, or null for a bid the query leaves out. */
  static Row row(Bid bid) {
    String id = channelId(bid);
    return id == null ? null : new Row(bid.auction(), bid.bidder(), bid.price(), bid.channel(), id);
  }

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), Json.serde(Bid.class)))
        .mapValues(Q21::row)
        .filter((auction, row) -> row != null)
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
