"""Nexmark q16, channel statistics per day: q15's statistics per channel and day, with the
latest minute of the day that saw a bid.

SQL (Flink's Nexmark)::

    SELECT channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`,
           max(DATE_FORMAT(dateTime, 'HH:mm')) AS `minute`,
           count(*) AS total_bids, ... (q15's twelve counts)
    FROM bid
    GROUP BY channel, DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Mapping: as q15 (two aggregations, the second with an adder and a subtractor), with the
channel in both keys:

1. Each bid becomes two facts, keyed ``"{day}|B|{bidder}|{channel}"`` and
   ``"{day}|A|{auction}|{channel}"``, aggregated to rows ``[rank1, rank2, rank3, minute]``
   (bids per rank, and the latest ``HH:mm`` of the key's bids).
2. The rows, regrouped by ``{"channel", "day"}``, add to and subtract from the statistics.
   ``minute`` is a maximum, which a subtractor cannot undo; it needs not: a fact row's minute
   only grows and rows are never deleted, so the maximum over every row ever added is the
   maximum over the rows as they are. The subtractor leaves it alone.

Output: key ``{"channel": c, "day": d}`` (compact JSON); value ``{"channel", "day", "minute",
"total_bids", …, "rank3_auctions"}``: the SQL's columns.

What differs from the SQL: as q15, every change is emitted at once (coalesced per commit with
the record cache); ``day`` and ``minute`` are read in UTC.

:func:`oracle` returns ``{key text: value}``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import KeyValue, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, day, key_text, minute, price_rank
from fluvial.bench.nexmark.queries.q15 import COLUMNS


def facts(auction: str, bid: dict[str, Any]) -> list[KeyValue[str, list[Any]]]:
    ms = bid["dateTime"]
    d, channel = day(ms), bid["channel"]
    value = [price_rank(bid["price"]), minute(ms)]
    return [
        KeyValue(f"{d}|B|{bid['bidder']}|{channel}", value),
        KeyValue(f"{d}|A|{bid['auction']}|{channel}", value),
    ]


def count_rank(key: str, fact: list[Any], row: list[Any]) -> list[Any]:
    rank, hh_mm = fact
    row = list(row)
    row[rank] += 1
    if hh_mm > row[3]:
        row[3] = hh_mm
    return row


def by_channel_day(key: str, row: list[Any]) -> KeyValue[dict[str, str], list[Any]]:
    """A fact row regrouped by channel and day, its kind (``B`` or ``A``) kept in front."""
    d, kind, _, channel = key.split("|", 3)
    return KeyValue({"channel": channel, "day": d}, [kind, *row])


def change(
    group: dict[str, str], row: list[Any], stats: dict[str, Any], sign: int
) -> dict[str, Any]:
    kind, c1, c2, c3, hh_mm = row
    stats = dict(stats)
    stats["channel"], stats["day"] = group["channel"], group["day"]
    if sign > 0 and hh_mm > stats["minute"]:
        stats["minute"] = hh_mm
    if kind == "B":
        stats["total_bids"] += sign * (c1 + c2 + c3)
        stats["rank1_bids"] += sign * c1
        stats["rank2_bids"] += sign * c2
        stats["rank3_bids"] += sign * c3
        column = "bidders"
    else:
        column = "auctions"
    # A new fact key's old row is the initializer's (no bids): it counts for nothing.
    stats[f"total_{column}"] += sign * (c1 + c2 + c3 > 0)
    stats[f"rank1_{column}"] += sign * (c1 > 0)
    stats[f"rank2_{column}"] += sign * (c2 > 0)
    stats[f"rank3_{column}"] += sign * (c3 > 0)
    return stats


def initial() -> dict[str, Any]:
    return {"minute": "", **dict.fromkeys(COLUMNS, 0)}


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .flat_map(facts)
        .group_by_key(key_serde=serdes.string(), value_serde=serdes.json())
        .aggregate(lambda: [0, 0, 0, ""], count_rank)
        .group_by(by_channel_day, key_serde=serdes.json(), value_serde=serdes.json())
        .aggregate(
            initial,
            lambda group, row, stats: change(group, row, stats, 1),
            lambda group, row, stats: change(group, row, stats, -1),
        )
        .to_stream()
        .to(output, key_serde=serdes.json(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for bid in bids(events):
        groups[(bid["channel"], day(bid["dateTime"]))].append(bid)
    result = {}
    for (channel, d), group in groups.items():
        row: dict[str, Any] = {
            "channel": channel,
            "day": d,
            "minute": max(minute(bid["dateTime"]) for bid in group),
            "total_bids": len(group),
            "total_bidders": len({bid["bidder"] for bid in group}),
            "total_auctions": len({bid["auction"] for bid in group}),
        }
        for rank in range(3):
            in_rank = [bid for bid in group if price_rank(bid["price"]) == rank]
            row[f"rank{rank + 1}_bids"] = len(in_rank)
            row[f"rank{rank + 1}_bidders"] = len({bid["bidder"] for bid in in_rank})
            row[f"rank{rank + 1}_auctions"] = len({bid["auction"] for bid in in_rank})
        result[key_text({"channel": channel, "day": d})] = row
    return result
