package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.Model.Person;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;

/**
 * Nexmark q3, local item suggestion (fluvial.bench.nexmark.queries.q3): a foreign-key join of the
 * auction table (category 10) with the people table (OR, ID, CA) on the seller.
 */
public final class Q3 {
  private static final Set<String> STATES = Set.of("OR", "ID", "CA");

  private Q3() {}

  public record Row(String name, String city, String state, long id) {}

  public static void build(StreamsBuilder builder, Map<String, String> topics, String output) {
    KTable<String, Auction> auctions =
        builder
            .table(topics.get("auction"), Consumed.with(Serdes.String(), Json.serde(Auction.class)))
            .filter((key, auction) -> auction.category() == 10);
    KTable<String, Person> people =
        builder
            .table(topics.get("person"), Consumed.with(Serdes.String(), Json.serde(Person.class)))
            .filter((key, person) -> STATES.contains(person.state()));
    auctions
        .join(
            people,
            auction -> Long.toString(auction.seller()),
            (auction, person) -> new Row(person.name(), person.city(), person.state(), auction.id()),
            Materialized.with(Serdes.String(), Json.serde(Row.class)))
        .toStream()
        .to(output, Produced.with(Serdes.String(), Json.serde(Row.class)));
  }
}
