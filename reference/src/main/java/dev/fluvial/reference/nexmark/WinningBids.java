package dev.fluvial.reference.nexmark;

import dev.fluvial.reference.nexmark.Model.Auction;
import dev.fluvial.reference.nexmark.Model.Bid;
import java.time.Duration;
import java.util.Map;
import java.util.function.UnaryOperator;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.JoinWindows;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.StreamJoined;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * Winning bids, shared by q4, q6 and q9 (fluvial.bench.nexmark.queries._winning): each auction's
 * highest valid bid, emitted once when the auction closes on stream time.
 *
 * <p>A windowed join of bids with their auctions (co-partitioned by auction id) keeps the bids
 * within each auction's run; a processor keeps each open auction's best bid in a key-value store
 * keyed by expiry and auction id, and a stream-time punctuator emits and forgets the auctions
 * whose expiry lies more than {@link #GRACE_MS} behind stream time.
 */
public final class WinningBids {
  /** How far behind stream time an auction's expiry must lie before it closes. */
  public static final long GRACE_MS = 1_000;

  /** The longest an auction runs (fluvial.bench.nexmark.model.MAX_AUCTION_MS). */
  public static final long MAX_AUCTION_MS = 20_000;

  private WinningBids() {}

  /** An auction (its columns a query keeps) with a bid. */
  public record AuctionBid(Auction auction, Bid bid) {}

  /** Higher price, then earlier, then lower bidder, then smaller extra. */
  static boolean better(Bid bid, Bid than) {
    if (bid.price() != than.price()) {
      return bid.price() > than.price();
    }
    if (bid.dateTime() != than.dateTime()) {
      return bid.dateTime() < than.dateTime();
    }
    if (bid.bidder() != than.bidder()) {
      return bid.bidder() < than.bidder();
    }
    return bid.extra().compareTo(than.extra()) < 0;
  }

  /** Each closed auction, keyed by its id, with its winning bid; {@code project} keeps columns. */
  public static KStream<String, AuctionBid> closedAuctions(
      StreamsBuilder builder, Map<String, String> topics, String name, UnaryOperator<Auction> project) {
    Serde<Auction> auctionSerde = Json.serde(Auction.class);
    Serde<Bid> bidSerde = Json.serde(Bid.class);
    KStream<String, Auction> auctions =
        builder.stream(topics.get("auction"), Consumed.with(Serdes.String(), auctionSerde));
    KStream<String, Bid> bids =
        builder.stream(topics.get("bid"), Consumed.with(Serdes.String(), bidSerde));
    String store = name + "-open-auctions";
    builder.addStateStore(
        Stores.keyValueStoreBuilder(
            Stores.persistentKeyValueStore(store), Serdes.String(), Json.serde(AuctionBid.class)));
    return bids.join(
            auctions,
            (bid, auction) -> new AuctionBid(project.apply(auction), bid),
            JoinWindows.ofTimeDifferenceAndGrace(
                    Duration.ofMillis(MAX_AUCTION_MS), Duration.ofMillis(GRACE_MS))
                .after(Duration.ZERO),
            StreamJoined.with(Serdes.String(), bidSerde, auctionSerde))
        .filter((key, pair) -> pair.bid().dateTime() <= pair.auction().expires())
        .process(() -> new CloseAuctions(store), store);
  }

  private static String expiryKey(long expires, long id) {
    // Zero-padded: the store's byte order is the order of expiry, then of auction id.
    return String.format("%013d/%d", expires, id);
  }

  /** Keeps each open auction's best bid; emits and forgets it once the auction closes. */
  static final class CloseAuctions implements Processor<String, AuctionBid, String, AuctionBid> {
    private final String storeName;
    private ProcessorContext<String, AuctionBid> context;
    private KeyValueStore<String, AuctionBid> store;
    private Long nextExpiry; // the earliest expiry in the store, null when empty

    CloseAuctions(String storeName) {
      this.storeName = storeName;
    }

    @Override
    public void init(ProcessorContext<String, AuctionBid> context) {
      this.context = context;
      this.store = context.getStateStore(storeName);
      this.nextExpiry = firstExpiry(null);
      context.schedule(Duration.ofMillis(1), PunctuationType.STREAM_TIME, this::closeExpired);
    }

    @Override
    public void process(Record<String, AuctionBid> record) {
      AuctionBid pair = record.value();
      long expires = pair.auction().expires();
      String key = expiryKey(expires, pair.auction().id());
      AuctionBid best = store.get(key);
      if (best == null || better(pair.bid(), best.bid())) {
        store.put(key, pair);
      }
      if (nextExpiry == null || expires < nextExpiry) {
        nextExpiry = expires;
      }
    }

    private void closeExpired(long streamTime) {
      if (nextExpiry == null || nextExpiry + GRACE_MS >= streamTime) {
        return;
      }
      long last = streamTime - GRACE_MS - 1;
      java.util.List<KeyValue<String, AuctionBid>> closed = new java.util.ArrayList<>();
      // From the earliest expiry held, not from the store's start: the closed auctions before
      // it are deletes a scan from the start would step over every time.
      try (KeyValueIterator<String, AuctionBid> it =
          store.range(String.format("%013d/", nextExpiry), String.format("%013d/~", last))) {
        it.forEachRemaining(closed::add);
      }
      for (KeyValue<String, AuctionBid> entry : closed) {
        store.delete(entry.key);
        Auction auction = entry.value.auction();
        context.forward(new Record<>(Long.toString(auction.id()), entry.value, auction.expires()));
      }
      nextExpiry = firstExpiry(String.format("%013d/", last + 1));
    }

    /** The earliest expiry at or after {@code start} (every expiry before it is closed). */
    private Long firstExpiry(String start) {
      try (KeyValueIterator<String, AuctionBid> it = store.range(start, null)) {
        return it.hasNext() ? Long.parseLong(it.next().key.split("/", 2)[0]) : null;
      }
    }
  }
}
