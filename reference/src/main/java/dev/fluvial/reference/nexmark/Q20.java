package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.StreamJoined;

/**
 * Nexmark q20, expand bid with auction: bids joined with their category-10 auction, a
 * stream-stream join of 20 s either way and 10 s of grace (see queries/q20.py).
 */
public final class Q20 {
  static final long CATEGORY = 10;
  static final long JOIN_MS = 20_000;
  static final long GRACE_MS = 10_000;

  private Q20() {}

  static JsonNode row(JsonNode bid, JsonNode auction) {
    return Columns.object()
        .put("auction", bid.get("auction").asLong())
        .put("bidder", bid.get("bidder").asLong())
        .put("price", bid.get("price").asLong())
        .put("channel", bid.get("channel").asText())
        .put("url", bid.get("url").asText())
        .put("bid_dateTime", bid.get("dateTime").asLong())
        .put("bid_extra", bid.get("extra").asText())
        .put("itemName", auction.get("itemName").asText())
        .put("description", auction.get("description").asText())
        .put("initialBid", auction.get("initialBid").asLong())
        .put("reserve", auction.get("reserve").asLong())
        .put("auction_dateTime", auction.get("dateTime").asLong())
        .put("expires", auction.get("expires").asLong())
        .put("seller", auction.get("seller").asLong())
        .put("category", auction.get("category").asLong())
        .put("auction_extra", auction.get("extra").asText());
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    KStream<String, JsonNode> category10 =
        b.stream(topics.get("auction"), Consumed.with(Serdes.String(), Columns.JSON))
            .filter((id, auction) -> auction.get("category").asLong() == CATEGORY);
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .join(
            category10,
            Q20::row,
            JoinWindows.ofTimeDifferenceAndGrace(
                Duration.ofMillis(JOIN_MS), Duration.ofMillis(GRACE_MS)),
            StreamJoined.with(Serdes.String(), Columns.JSON, Columns.JSON))
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
