"""Winning bids, shared by q4, q6 and q9: each auction's highest bid, once the auction closes.

A bid is valid for its auction if it falls within the auction's run: ``auction.dateTime <=
bid.dateTime <= auction.expires``. The winning bid is the valid bid with the highest price;
ties go to the earlier bid, then the lower bidder id, then the smaller ``extra`` (a total order,
so every system picks the same bid).

Kafka Streams has no window whose bounds come from the data, so the formulation is:

1. **Join** each bid with its auction (``bids.join(auctions, ...)``; both topics are keyed by
   auction id and so co-partitioned), with ``JoinWindows`` that look back
   :data:`~fluvial.bench.nexmark.model.MAX_AUCTION_MS` from the bid and not forward, then keep
   the pairs whose bid is no later than the auction's expiry.
2. **Close** the auctions with a Processor API processor and a key-value store keyed by
   ``expiry/auction id`` (the store's order is the order of expiry): each pair updates its
   auction's best bid, and a stream-time punctuator (every millisecond of stream time) emits
   every auction whose expiry lies more than :data:`GRACE_MS` behind stream time, with its
   winning bid, and deletes it. The emitted record is keyed by auction id and stamped with
   the auction's expiry.

An auction without a valid bid never reaches step 2 and is never emitted (the SQL's inner join).

**When an auction counts as closed.** Stream time is the task's: the largest ``dateTime`` among
the auctions and bids of the auction's partition processed so far. At the end of the input, an
auction on partition ``p`` is closed if ``expires + GRACE_MS`` is below the largest
``dateTime`` of the auction and bid events on ``p``; later auctions are still open and have
no result yet. :func:`closed_winners` computes exactly that set.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import (
    JoinWindows,
    KStream,
    Processor,
    PunctuationType,
    Record,
    Stores,
    StreamsBuilder,
    serdes,
)
from fluvial.bench.nexmark.model import MAX_AUCTION_MS, partition

#: How far behind stream time an auction's expiry must lie before it closes: room for records
#: of the two topics that reach the task slightly out of time order.
GRACE_MS = 1_000


def better(bid: dict[str, Any], than: dict[str, Any]) -> bool:
    """Whether ``bid`` beats ``than``: higher price, then earlier, lower bidder, smaller extra."""
    if bid["price"] != than["price"]:
        return bid["price"] > than["price"]
    if bid["dateTime"] != than["dateTime"]:
        return bid["dateTime"] < than["dateTime"]
    if bid["bidder"] != than["bidder"]:
        return bid["bidder"] < than["bidder"]
    return bid["extra"] < than["extra"]


def _expiry_key(auction: dict[str, Any]) -> str:
    # Zero-padded: the store's byte order is the order of expiry, then of auction id.
    return f"{auction['expires']:013d}/{auction['id']}"


class CloseAuctions(Processor[str, dict[str, Any]]):
    """Keeps each open auction's best bid; emits and forgets it once the auction closes."""

    def __init__(self, store_name: str) -> None:
        self.store_name = store_name

    def init(self, context: Any) -> None:
        super().init(context)
        self.store = context.get_state_store(self.store_name)
        # The earliest expiry in the store (None: empty), so most punctuations scan nothing.
        self.next_expiry = self._first_expiry()
        context.schedule(1, PunctuationType.STREAM_TIME, self.close_expired)

    def process(self, record: Record[str, dict[str, Any]]) -> None:
        pair = record.value
        auction = pair["auction"]
        key = _expiry_key(auction)
        best = self.store.get(key)
        if best is None or better(pair["bid"], best["bid"]):
            self.store.put(key, pair)
        if self.next_expiry is None or auction["expires"] < self.next_expiry:
            self.next_expiry = auction["expires"]

    def close_expired(self, stream_time: int) -> None:
        """Emit every auction with ``expires + GRACE_MS < stream_time``, in order of expiry."""
        if self.next_expiry is None or self.next_expiry + GRACE_MS >= stream_time:
            return
        last = stream_time - GRACE_MS - 1
        # From the earliest expiry held, not from the store's start: the closed auctions
        # before it are deletes a scan from the start would step over every time.
        closed = list(self.store.range(f"{self.next_expiry:013d}/", f"{last:013d}/~"))
        for key, pair in closed:
            self.store.delete(key)
            auction = pair["auction"]
            self.context.forward(Record(str(auction["id"]), pair, auction["expires"]))
        self.next_expiry = self._first_expiry(f"{last + 1:013d}/")

    def _first_expiry(self, start: str | None = None) -> int | None:
        """The earliest expiry at or after ``start`` (every expiry before it is closed)."""
        for key, _pair in self.store.range(start, None):
            return int(key.split("/", 1)[0])
        return None


def closed_auctions(
    builder: StreamsBuilder, topics: dict[str, str], name: str, auction_columns: tuple[str, ...]
) -> KStream:
    """Each closed auction with its winning bid: key auction id, value ``{"auction": {...},
    "bid": {...}}`` (the auction's ``auction_columns``, ``id`` and ``expires`` among them)."""
    string, json = serdes.string(), serdes.json()
    auctions = builder.stream(topics["auction"], key_serde=string, value_serde=json)
    bids = builder.stream(topics["bid"], key_serde=string, value_serde=json)

    def pair(bid: dict[str, Any], auction: dict[str, Any]) -> dict[str, Any]:
        return {"auction": {c: auction[c] for c in auction_columns}, "bid": bid}

    store = f"{name}-open-auctions"
    builder.add_state_store(Stores.key_value_store_builder(store, string, json))
    return (
        bids.join(
            auctions,
            pair,
            JoinWindows.of_time_difference_and_grace(MAX_AUCTION_MS, GRACE_MS).after(0),
        )
        .filter(lambda key, p: p["bid"]["dateTime"] <= p["auction"]["expires"])
        .process(lambda: CloseAuctions(store), store)
    )


# -- the oracle's side: plain Python ---------------------------------------------------------


def closed_winners(
    events: list[dict[str, Any]], partitions: int
) -> dict[int, tuple[dict[str, Any], dict[str, Any]]]:
    """auction id -> (auction, winning bid) for every auction closed at the end of ``events``."""
    auctions: dict[int, dict[str, Any]] = {}
    stream_time: dict[int, int] = defaultdict(lambda: -1)
    bids = []
    for event in events:
        if "bidder" in event:
            bids.append(event)
            p = partition(str(event["auction"]), partitions)
        elif "seller" in event:
            auctions[event["id"]] = event
            p = partition(str(event["id"]), partitions)
        else:
            continue
        stream_time[p] = max(stream_time[p], event["dateTime"])
    winners: dict[int, dict[str, Any]] = {}
    for bid in bids:
        auction = auctions.get(bid["auction"])
        if auction is None or not auction["dateTime"] <= bid["dateTime"] <= auction["expires"]:
            continue
        best = winners.get(auction["id"])
        if best is None or better(bid, best):
            winners[auction["id"]] = bid
    return {
        aid: (auctions[aid], bid)
        for aid, bid in winners.items()
        if auctions[aid]["expires"] + GRACE_MS < stream_time[partition(str(aid), partitions)]
    }
