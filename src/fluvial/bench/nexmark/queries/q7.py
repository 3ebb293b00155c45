"""Nexmark q7, highest bid: the bids with the highest price in each 10 s tumbling window.

SQL::

    SELECT B.auction, B.price, B.bidder, B.dateTime, B.extra
    FROM bid B
    JOIN (SELECT MAX(price) AS maxprice, window_end AS dateTime
          FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY window_start, window_end) B1
    ON B.price = B1.maxprice
    WHERE B.dateTime BETWEEN B1.dateTime - INTERVAL '10' SECOND AND B1.dateTime

Mapping, in two steps (a combiner, then the global maximum):

1. bids grouped by auction (their key already: no repartition), tumbling ``TimeWindows`` of
   10 s with :data:`GRACE_MS` of grace, aggregated into the highest-priced bids of the auction
   in the window, emitted once per window when it closes (``EmitStrategy.on_window_close``);
2. those re-keyed by window (a repartition) and aggregated into the window's highest price and
   the bids that reach it.

Key ``{"end", "start"}`` (the window, epoch ms); value ``{"bids": [...], "price": highest}``,
each bid ``{"auction", "bidder", "dateTime", "extra", "price"}``, sorted by auction, time,
bidder and extra. The SQL's rows for one window are the one value here.

What differs: the SQL's ``BETWEEN`` also admits a bid exactly at the window's end (which
belongs to the next window); here a window is ``[start, end)``. A window's result is revised as
its auctions' maxima arrive from each partition. At the end of the input, a window holds the
bids of the partitions whose stream time (their latest bid) has passed its end plus grace;
:func:`oracle` computes exactly that.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import EmitStrategy, KeyValue, Materialized, StreamsBuilder, TimeWindows, serdes
from fluvial.bench.nexmark.model import partition

SIZE_MS = 10_000
GRACE_MS = 1_000


def _order(bid: dict[str, Any]) -> tuple[int, int, int, str]:
    return bid["auction"], bid["dateTime"], bid["bidder"], bid["extra"]


def merge(top: dict[str, Any], bids: list[dict[str, Any]], price: int) -> dict[str, Any]:
    """The highest of ``top`` and ``bids`` (all priced ``price``)."""
    if price > top["price"]:
        return {"bids": sorted(bids, key=_order), "price": price}
    if price == top["price"]:
        return {"bids": sorted(top["bids"] + bids, key=_order), "price": price}
    return top


def add_bid(auction: str, bid: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    row = {c: bid[c] for c in ("auction", "bidder", "dateTime", "extra", "price")}
    return merge(top, [row], bid["price"])


def add_top(window: dict[str, int], auction_top: dict[str, Any], top: dict[str, Any]) -> Any:
    return merge(top, auction_top["bids"], auction_top["price"])


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    (
        builder.stream(topics["bid"], key_serde=string, value_serde=json)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE_MS, GRACE_MS))
        .emit_strategy(EmitStrategy.on_window_close())
        .aggregate(
            lambda: {"bids": [], "price": -1},
            add_bid,
            materialized=Materialized().with_(string, json),
        )
        .to_stream()
        .map(
            lambda windowed, top: KeyValue(
                {"end": windowed.window.end_ms, "start": windowed.window.start_ms}, top
            )
        )
        .group_by_key(key_serde=json, value_serde=json)
        .aggregate(
            lambda: {"bids": [], "price": -1},
            add_top,
            materialized=Materialized().with_(json, json),
        )
        .to_stream()
        .to(output, key_serde=json, value_serde=json)
    )


def oracle(events: list[dict[str, Any]], partitions: int) -> dict[str, dict[str, Any]]:
    tops: dict[tuple[int, int], dict[str, Any]] = {}  # (auction, window start) -> top bids
    stream_time: dict[int, int] = defaultdict(lambda: -1)
    for bid in events:
        if "bidder" not in bid:
            continue
        p = partition(str(bid["auction"]), partitions)
        stream_time[p] = max(stream_time[p], bid["dateTime"])
        start = bid["dateTime"] - bid["dateTime"] % SIZE_MS
        slot = (bid["auction"], start)
        tops[slot] = add_bid("", bid, tops.get(slot, {"bids": [], "price": -1}))
    result: dict[str, dict[str, Any]] = {}
    for (auction, start), top in tops.items():
        if start + SIZE_MS + GRACE_MS > stream_time[partition(str(auction), partitions)]:
            continue  # not closed on its partition at the end of the input
        key = f'{{"end":{start + SIZE_MS},"start":{start}}}'
        result[key] = merge(result.get(key, {"bids": [], "price": -1}), top["bids"], top["price"])
    return result
