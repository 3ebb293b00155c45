package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.LocalDate;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * What the q11–q22 twins share: the columns they derive from a bid and the JSON serde of their
 * values, as fluvial's {@code queries/_columns.py} and {@code serdes.json()} compute them.
 *
 * <ul>
 *   <li>{@code DATE_FORMAT(dateTime, 'yyyy-MM-dd')}, {@code 'HH:mm'} and {@code HOUR(dateTime)}
 *       are read in UTC;
 *   <li>price ranks: 0 below 10,000, 1 below 1,000,000, 2 above (the SQL's ranks 1 to 3);
 *   <li>JSON: compact, object fields sorted by name, UTF-8: the bytes of Python's {@code
 *       json.dumps(obj, separators=(",", ":"), sort_keys=True, ensure_ascii=False)}.
 * </ul>
 */
public final class Columns {
  static final long MS_PER_DAY = 86_400_000L;
  static final long RANK1_BELOW = 10_000;
  static final long RANK2_BELOW = 1_000_000;

  static final ObjectMapper MAPPER =
      JsonMapper.builder().enable(JsonNodeFeature.WRITE_PROPERTIES_SORTED).build();

  /** Compact sorted JSON: the values (and the composite keys) of every q11–q22 topic. */
  public static final Serde<JsonNode> JSON =
      Serdes.serdeFrom(
          (topic, node) -> node == null ? null : write(node),
          (topic, bytes) -> bytes == null ? null : read(bytes));

  private Columns() {}

  private static byte[] write(JsonNode node) {
    try {
      return MAPPER.writeValueAsBytes(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static JsonNode read(byte[] bytes) {
    try {
      return MAPPER.readTree(bytes);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  static ObjectNode object() {
    return MAPPER.createObjectNode();
  }

  /** {@code yyyy-MM-dd} of an epoch-millisecond time, in UTC. */
  static String day(long dateTimeMs) {
    return LocalDate.ofEpochDay(Math.floorDiv(dateTimeMs, MS_PER_DAY)).toString();
  }

  /** {@code HH:mm} of an epoch-millisecond time, in UTC. */
  static String minute(long dateTimeMs) {
    long minutes = Math.floorMod(Math.floorDiv(dateTimeMs, 60_000L), 1440L);
    long h = minutes / 60;
    long m = minutes % 60;
    return new String(
        new char[] {(char) ('0' + h / 10), (char) ('0' + h % 10), ':',
          (char) ('0' + m / 10), (char) ('0' + m % 10)});
  }

  /** The hour of the day (0–23), in UTC. */
  static int hour(long dateTimeMs) {
    return (int) Math.floorMod(Math.floorDiv(dateTimeMs, 3_600_000L), 24L);
  }

  /** 0, 1 or 2 for the SQL's price rank 1, 2 or 3. */
  static int priceRank(long price) {
    if (price < RANK1_BELOW) {
      return 0;
    }
    return price < RANK2_BELOW ? 1 : 2;
  }
}
