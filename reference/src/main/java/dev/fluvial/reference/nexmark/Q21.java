package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.Locale;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q21, add channel id: '0'–'3' for the four known channels, else the url's channel_id
 * parameter; bids with neither are left out (see queries/q21.py).
 */
public final class Q21 {
  static final Map<String, String> KNOWN_CHANNELS =
      Map.of("apple", "0", "google", "1", "facebook", "2", "baidu", "3");
  static final Pattern CHANNEL_ID = Pattern.compile("(&|^)channel_id=([^&]*)");

  private Q21() {}

  static String channelId(JsonNode bid) {
    String known = KNOWN_CHANNELS.get(bid.get("channel").asText().toLowerCase(Locale.ROOT));
    if (known != null) {
      return known;
    }
    Matcher found = CHANNEL_ID.matcher(bid.get("url").asText());
    return found.find() ? found.group(2) : null;
  }

  /** The output row, or null for a bid the query leaves out. */
  static JsonNode row(JsonNode bid) {
    String id = channelId(bid);
    if (id == null) {
      return null;
    }
    return Columns.object()
        .put("auction", bid.get("auction").asLong())
        .put("bidder", bid.get("bidder").asLong())
        .put("price", bid.get("price").asLong())
        .put("channel", bid.get("channel").asText())
        .put("channel_id", id);
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .mapValues(Q21::row)
        .filter((auction, row) -> row != null)
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
