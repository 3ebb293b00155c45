package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.Model.Person;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.state.Stores;

/**
 * Nexmark q8, monitor new users (fluvial.bench.nexmark.queries.q8): auctions re-keyed by seller
 * join a versioned people table as of their time; a pair counts in the same 10 s window.
 */
public final class Q8 {
  private static final long SIZE_MS = 10_000;

  private Q8() {}

  public record Row(long id, String name, long starttime) {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    KTable<String, Person> people =
        builder.table(
            topics.get("person"),
            Consumed.with(Serdes.String(), Json.serde(Person.class)),
            Materialized.<String, Person>as(
                    Stores.persistentVersionedKeyValueStore("q8-people", Duration.ofSeconds(60)))
                .withKeySerde(Serdes.String())
                .withValueSerde(Json.serde(Person.class)));
    builder.stream(topics.get("auction"), Consumed.with(Serdes.String(), Json.serde(Auction.class)))
        .selectKey((key, auction) -> Long.toString(auction.seller()))
        .join(
            people,
            (auction, person) -> {
              long start = person.dateTime() - person.dateTime() % SIZE_MS;
              if (auction.dateTime() - auction.dateTime() % SIZE_MS != start) {
                return null;
              }
              return new Row(person.id(), person.name(), start);
            },
            Joined.with(Serdes.String(), Json.serde(Auction.class), Json.serde(Person.class)))
        .filter((key, row) -> row != null)
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
