"""Nexmark q5, hot items: the auctions with the most bids in each sliding window.

SQL (hopping windows of 10 s every 2 s)::

    SELECT AuctionBids.auction, AuctionBids.num
    FROM (SELECT auction, count(*) AS num, window_start, window_end
          FROM TABLE(HOP(TABLE bid, DESCRIPTOR(dateTime), INTERVAL '2' SECOND,
                         INTERVAL '10' SECOND))
          GROUP BY auction, window_start, window_end) AS AuctionBids
    JOIN (SELECT max(num) AS maxn, window_start, window_end FROM (... the same counts ...)
          GROUP BY window_start, window_end) AS MaxBids
    ON the same window AND AuctionBids.num >= MaxBids.maxn

Mapping, in two steps:

1. bids grouped by auction (their key already: no repartition), hopping ``TimeWindows`` of 10 s
   advancing by 2 s with :data:`GRACE_MS` of grace, ``count``, emitted once per window when it
   closes (``EmitStrategy.on_window_close``);
2. the final counts re-keyed by window (a repartition) and aggregated into the window's highest
   count and the auctions that reach it.

Key ``{"end", "start"}`` (the window, epoch ms); value ``{"auctions": [ids, ascending],
"num": highest count}``. The SQL's rows for one window are the one value here.

What differs: a window's result appears once all its auctions' counts are final, and is revised
as the counts of the window arrive from each partition (the highest count only grows). At the
end of the input, a window counts the auctions of the partitions whose stream time (their
latest bid) has passed the window's end plus grace; :func:`oracle` computes exactly that.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import EmitStrategy, KeyValue, Materialized, StreamsBuilder, TimeWindows, serdes
from fluvial.bench.nexmark.model import partition

SIZE_MS = 10_000
ADVANCE_MS = 2_000
GRACE_MS = 1_000


def hottest(window: dict[str, int], row: dict[str, int], top: dict[str, Any]) -> dict[str, Any]:
    if row["num"] > top["num"]:
        return {"auctions": [row["auction"]], "num": row["num"]}
    if row["num"] == top["num"]:
        return {"auctions": sorted({*top["auctions"], row["auction"]}), "num": top["num"]}
    return top


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    (
        builder.stream(topics["bid"], key_serde=string, value_serde=json)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(SIZE_MS, GRACE_MS).advance_by(ADVANCE_MS))
        .emit_strategy(EmitStrategy.on_window_close())
        .count()
        .to_stream()
        .map(
            lambda windowed, num: KeyValue(
                {"end": windowed.window.end_ms, "start": windowed.window.start_ms},
                {"auction": int(windowed.key), "num": num},
            )
        )
        .group_by_key(key_serde=json, value_serde=json)
        .aggregate(
            lambda: {"auctions": [], "num": 0},
            hottest,
            materialized=Materialized().with_(json, json),
        )
        .to_stream()
        .to(output, key_serde=json, value_serde=json)
    )


def window_key(start: int) -> str:
    return f'{{"end":{start + SIZE_MS},"start":{start}}}'


def oracle(events: list[dict[str, Any]], partitions: int) -> dict[str, dict[str, Any]]:
    counts: dict[tuple[int, int], int] = defaultdict(int)  # (auction, window start) -> bids
    stream_time: dict[int, int] = defaultdict(lambda: -1)
    for bid in events:
        if "bidder" not in bid:
            continue
        ts = bid["dateTime"]
        p = partition(str(bid["auction"]), partitions)
        stream_time[p] = max(stream_time[p], ts)
        start = max(0, ts - SIZE_MS + ADVANCE_MS)
        start -= start % ADVANCE_MS
        while start <= ts:
            counts[(bid["auction"], start)] += 1
            start += ADVANCE_MS
    result: dict[str, dict[str, Any]] = {}
    for (auction, start), num in counts.items():
        if start + SIZE_MS + GRACE_MS > stream_time[partition(str(auction), partitions)]:
            continue  # not closed on its partition at the end of the input
        key = window_key(start)
        top = result.get(key, {"auctions": [], "num": 0})
        result[key] = hottest({}, {"auction": auction, "num": num}, top)
    return result
