package dev.fluvial.reference.nexmark;

import com.fasterxml.jackson.annotation.JsonInclude;

/**
 * The Nexmark events as they are on the topics (fluvial.bench.nexmark.model): JSON objects keyed
 * by a decimal id, times in epoch milliseconds, prices in cents.
 */
public final class Model {
  private Model() {}

  public record Person(
      long id,
      String name,
      String emailAddress,
      String creditCard,
      String city,
      String state,
      long dateTime,
      String extra) {}

  /**
   * An auction. Its fields are nullable so a query can keep only the columns it needs (a
   * projection leaves the others null, and they are not written).
   */
  @JsonInclude(JsonInclude.Include.NON_NULL)
  public record Auction(
      Long id,
      String itemName,
      String description,
      Long initialBid,
      Long reserve,
      Long dateTime,
      Long expires,
      Long seller,
      Long category,
      String extra) {}

  public record Bid(
      long auction,
      long bidder,
      long price,
      String channel,
      String url,
      long dateTime,
      String extra) {}

  /** A time window as an output key: {"end": ms, "start": ms}. */
  public record WindowKey(long end, long start) {}

  /** The input topics of a run (fluvial.bench.nexmark.model.topics). */
  public static java.util.Map<String, String> topics(String prefix) {
    return java.util.Map.of(
        "person", prefix + "-person", "auction", prefix + "-auction", "bid", prefix + "-bid");
  }
}
