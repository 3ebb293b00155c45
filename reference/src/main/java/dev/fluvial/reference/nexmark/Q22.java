package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q22, url directories: pieces 3, 4 and 5 of the url split on every '/', empty pieces
 * kept, null past its end (see queries/q22.py).
 */
public final class Q22 {
  private Q22() {}

  static JsonNode row(JsonNode bid) {
    String[] pieces = bid.get("url").asText().split("/", -1);
    ObjectNode row =
        Columns.object()
            .put("auction", bid.get("auction").asLong())
            .put("bidder", bid.get("bidder").asLong())
            .put("price", bid.get("price").asLong())
            .put("channel", bid.get("channel").asText());
    row.put("dir1", pieces.length > 3 ? pieces[3] : null);
    row.put("dir2", pieces.length > 4 ? pieces[4] : null);
    row.put("dir3", pieces.length > 5 ? pieces[5] : null);
    return row;
  }

  public static void build(StreamsBuilder b, Map<String, String> topics, String output) {
    b.stream(topics.get("bid"), Consumed.with(Serdes.String(), Columns.JSON))
        .mapValues(Q22::row)
        .to(output, Produced.with(Serdes.String(), Columns.JSON));
  }
}
