"""Nexmark q15, bidding statistics per day: bids, distinct bidders and distinct auctions, in
total and per price rank.

SQL (Flink's Nexmark)::

    SELECT DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`,
           count(*) AS total_bids,
           count(*) FILTER (WHERE price < 10000) AS rank1_bids,
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
           count(DISTINCT bidder) AS total_bidders,
           count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
           ... rank2_bidders, rank3_bidders,
           count(DISTINCT auction) AS total_auctions,
           ... rank1_auctions, rank2_auctions, rank3_auctions
    FROM bid
    GROUP BY DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Mapping: the distinct counts are two aggregations, the DSL's way to count distinct values
with a bounded cost per record:

1. Each bid becomes two facts, keyed ``"{day}|B|{bidder}"`` and ``"{day}|A|{auction}"`` with
   its price rank as value (``flat_map``, a repartition); ``aggregate`` counts each key's bids
   per rank: a table of rows ``[rank1, rank2, rank3]``.
2. That table, regrouped by day (``group_by``, a second repartition), is aggregated with an
   adder and a subtractor: a bidder row adds its bids to the bid counts and 1 to each distinct
   bidder count it has bids in, total and per rank (an auction row likewise to the auction
   counts).
   When a row changes, the subtractor takes its old value out and the adder puts the new one
   in, so a bidder or auction counts once however many bids it makes.

Output: key the day (``yyyy-MM-dd``, UTC, plain text); value ``{"day", "total_bids",
"rank1_bids", …, "rank3_auctions"}``: the SQL's columns.

What differs from the SQL: every change of a day's statistics is emitted at once (the SQL's
result is an updating table too); with the record cache, changes are coalesced per commit.
The per-day result is one key, so its aggregation runs in one task, as the SQL's does.

:func:`oracle` returns ``{day: value}``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import KeyValue, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, day, price_rank

COLUMNS = tuple(
    f"{prefix}_{what}"
    for what in ("bids", "bidders", "auctions")
    for prefix in ("total", "rank1", "rank2", "rank3")
)


def facts(auction: str, bid: dict[str, Any]) -> list[KeyValue[str, int]]:
    d, rank = day(bid["dateTime"]), price_rank(bid["price"])
    return [KeyValue(f"{d}|B|{bid['bidder']}", rank), KeyValue(f"{d}|A|{bid['auction']}", rank)]


def count_rank(key: str, rank: int, counts: list[int]) -> list[int]:
    counts = list(counts)
    counts[rank] += 1
    return counts


def by_day(key: str, counts: list[int]) -> KeyValue[str, list[Any]]:
    """A fact row regrouped by its day, its kind (``B`` or ``A``) kept in front of the counts."""
    return KeyValue(key[:10], [key[11], *counts])


def change(day_key: str, row: list[Any], stats: dict[str, Any], sign: int) -> dict[str, Any]:
    kind, c1, c2, c3 = row
    stats = dict(stats)
    stats["day"] = day_key
    if kind == "B":
        stats["total_bids"] += sign * (c1 + c2 + c3)
        stats["rank1_bids"] += sign * c1
        stats["rank2_bids"] += sign * c2
        stats["rank3_bids"] += sign * c3
        column = "bidders"
    else:
        column = "auctions"
    # A new fact key arrives with the initializer's [0, 0, 0] as its old row, as Kafka Streams
    # forwards it: every count here is of rows with bids, never of rows.
    stats[f"total_{column}"] += sign * (c1 + c2 + c3 > 0)
    stats[f"rank1_{column}"] += sign * (c1 > 0)
    stats[f"rank2_{column}"] += sign * (c2 > 0)
    stats[f"rank3_{column}"] += sign * (c3 > 0)
    return stats


def initial() -> dict[str, Any]:
    return dict.fromkeys(COLUMNS, 0)


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .flat_map(facts)
        .group_by_key(key_serde=serdes.string(), value_serde=serdes.integer())
        .aggregate(lambda: [0, 0, 0], count_rank)
        .group_by(by_day, key_serde=serdes.string(), value_serde=serdes.json())
        .aggregate(
            initial,
            lambda d, row, stats: change(d, row, stats, 1),
            lambda d, row, stats: change(d, row, stats, -1),
        )
        .to_stream()
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    bidders: dict[str, list[set[int]]] = defaultdict(lambda: [set(), set(), set()])
    auctions: dict[str, list[set[int]]] = defaultdict(lambda: [set(), set(), set()])
    for bid in bids(events):
        d, rank = day(bid["dateTime"]), price_rank(bid["price"])
        counts[d][rank] += 1
        bidders[d][rank].add(bid["bidder"])
        auctions[d][rank].add(bid["auction"])
    result = {}
    for d, (c1, c2, c3) in counts.items():
        row: dict[str, Any] = {"day": d, "total_bids": c1 + c2 + c3}
        row.update(rank1_bids=c1, rank2_bids=c2, rank3_bids=c3)
        for name, sets in (("bidders", bidders[d]), ("auctions", auctions[d])):
            row[f"total_{name}"] = len(set().union(*sets))
            for i, ids in enumerate(sets, 1):
                row[f"rank{i}_{name}"] = len(ids)
        result[d] = row
    return result
