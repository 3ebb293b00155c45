package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.MapperFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import com.fasterxml.jackson.databind.cfg.JsonNodeFeature;
import com.fasterxml.jackson.databind.json.JsonMapper;
import java.io.IOException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * JSON serdes that write what fluvial's {@code serdes.json()} writes: compact, with the properties
 * of records, maps and object nodes sorted by name. Equal results are then equal bytes on both
 * systems' output topics.
 */
public final class Json {
  public static final ObjectMapper MAPPER =
      JsonMapper.builder()
          .enable(MapperFeature.SORT_PROPERTIES_ALPHABETICALLY)
          .disable(MapperFeature.SORT_CREATOR_PROPERTIES_FIRST)
          .enable(SerializationFeature.ORDER_MAP_ENTRIES_BY_KEYS)
          .enable(JsonNodeFeature.WRITE_PROPERTIES_SORTED)
          .disable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES)
          .build();

  private Json() {}

  /** A serde of {@code type} (a record, a map, a {@link JsonNode}) as sorted compact JSON. */
  public static <T> Serde<T> serde(Class<T> type) {
    return Serdes.serdeFrom(
        (topic, value) -> {
          if (value == null) {
            return null;
          }
          try {
            return MAPPER.writeValueAsBytes(value);
          } catch (JsonProcessingException e) {
            throw new SerializationException("cannot write " + type.getSimpleName(), e);
          }
        },
        (topic, bytes) -> {
          if (bytes == null) {
            return null;
          }
          try {
            return MAPPER.readValue(bytes, type);
          } catch (IOException e) {
            throw new SerializationException("cannot read " + type.getSimpleName(), e);
          }
        });
  }

  /** Any JSON value as a tree. */
  public static Serde<JsonNode> node() {
    return serde(JsonNode.class);
  }
}
