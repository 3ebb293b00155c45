"""Nexmark q12, processing-time windows: how many bids each bidder made in 10 s of wall clock.

SQL (Flink's Nexmark)::

    SELECT B.bidder, count(*) AS bid_count,
           TUMBLE_START(B.p_time, INTERVAL '10' SECOND) AS starttime,
           TUMBLE_END(B.p_time, INTERVAL '10' SECOND) AS endtime
    FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
    GROUP BY B.bidder, TUMBLE(B.p_time, INTERVAL '10' SECOND)

Mapping: the bid source's timestamp extractor returns the wall clock when the bid is read
(Kafka Streams' ``WallclockTimestampExtractor``), so the DSL's own tumbling windows count in
processing time: bids re-keyed by bidder (a repartition, which carries that timestamp along),
10 s tumbling windows (epoch-aligned, as the SQL's ``TUMBLE``) with 10 s of grace, ``count``:

- key ``{"bidder": b, "start": s, "end": e}`` (compact JSON);
- value ``{"bidder": b, "bid_count": n, "starttime": s, "endtime": e}``.

Why not a wall-clock punctuator: a punctuator over a store of counts needs the Processor API,
and its windows would start when each task happened to start; the timestamp extractor keeps the
query in the DSL with the SQL's window bounds, on both engines alike.

What differs from the SQL: every bid updates its window's row at once (unless the record cache
holds it back), where the SQL emits a window when it ends.

Comparing runs: which window a bid falls in depends on when each system read it, so the rows
of two runs (or of a run and :func:`oracle`) differ. What does not depend on timing is the
number of bids per bidder summed over its windows: :func:`oracle` returns that,
``{bidder: count}``, and :func:`per_bidder` sums a run's final rows the same way.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from fluvial import KeyValue, StreamsBuilder, TimeWindows, serdes
from fluvial.bench.nexmark.queries._columns import bids

WINDOW_MS = 10_000
GRACE_MS = 10_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def _row(window: Any, count: int) -> tuple[dict[str, int], dict[str, int]]:
    bidder, start, end = window.key, window.window.start_ms, window.window.end_ms
    return {"bidder": bidder, "start": start, "end": end}, {
        "bidder": bidder,
        "bid_count": count,
        "starttime": start,
        "endtime": end,
    }


def build(
    builder: StreamsBuilder,
    topics: dict[str, str],
    output: str,
    *,
    clock: Callable[[], int] = wall_clock_ms,
) -> None:
    """``clock`` gives the processing time in ms (tests pass a fixed one)."""
    (
        builder.stream(
            topics["bid"],
            key_serde=serdes.string(),
            value_serde=serdes.json(),
            timestamp_extractor=lambda record, partition_time_ms: clock(),
        )
        # Only the bidder counts: the repartition carries no more than it needs.
        .map(lambda auction, bid: KeyValue(bid["bidder"], bid["auction"]))
        .group_by_key(key_serde=serdes.long(), value_serde=serdes.long())
        .windowed_by(TimeWindows.of_size_and_grace(WINDOW_MS, GRACE_MS))
        .count()
        .to_stream()
        .map(_row)
        .to(output, key_serde=serdes.json(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[int, int]:
    """Bids per bidder: what every run's windows of that bidder add up to."""
    return dict(Counter(bid["bidder"] for bid in bids(events)))


def per_bidder(final_rows: dict[Any, dict[str, int]]) -> dict[int, int]:
    """A run's final rows (one per window key, deleted keys left out) summed per bidder."""
    totals: Counter[int] = Counter()
    for row in final_rows.values():
        totals[row["bidder"]] += row["bid_count"]
    return dict(totals)
