"""Nexmark q17, auction statistics per day: bids per price rank, and min, max, average and sum
of the prices, per auction and day.

SQL (Flink's Nexmark)::

    SELECT auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd') AS `day`,
           count(*) AS total_bids,
           count(*) FILTER (WHERE price < 10000) AS rank1_bids,
           count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
           count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
           min(price) AS min_price, max(price) AS max_price,
           avg(price) AS avg_price, sum(price) AS sum_price
    FROM bid
    GROUP BY auction, DATE_FORMAT(dateTime, 'yyyy-MM-dd')

Mapping: each bid's price re-keyed by ``{"auction", "day"}`` (a repartition: the key changed,
though the auction alone already placed it), then one ``aggregate`` whose value is the row.

Output: key ``{"auction": a, "day": d}`` (compact JSON); value ``{"auction", "day",
"total_bids", "rank1_bids", "rank2_bids", "rank3_bids", "min_price", "max_price",
"avg_price", "sum_price"}``.

What differs from the SQL: ``avg_price`` is ``sum_price // total_bids``, the integer average
the SQL's ``avg`` of a ``BIGINT`` gives (prices are positive, so truncating is flooring); with
``sum_price`` and ``total_bids`` beside it the exact average is at hand. Every bid's row is
emitted at once (coalesced per commit with the record cache). ``day`` is read in UTC.

:func:`oracle` returns ``{key text: value}``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import KeyValue, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, day, key_text, price_rank

_RANKS = ("rank1_bids", "rank2_bids", "rank3_bids")


def by_auction_day(auction: str, bid: dict[str, Any]) -> KeyValue[dict[str, Any], int]:
    return KeyValue({"auction": bid["auction"], "day": day(bid["dateTime"])}, bid["price"])


def initial() -> dict[str, Any]:
    return {"total_bids": 0}


def add(group: dict[str, Any], price: int, row: dict[str, Any]) -> dict[str, Any]:
    if row["total_bids"] == 0:
        row = {"auction": group["auction"], "day": group["day"], "total_bids": 0,
               "rank1_bids": 0, "rank2_bids": 0, "rank3_bids": 0,
               "min_price": price, "max_price": price, "avg_price": 0, "sum_price": 0}  # fmt: skip
    else:
        row = dict(row)
    row["total_bids"] += 1
    row[_RANKS[price_rank(price)]] += 1
    if price < row["min_price"]:
        row["min_price"] = price
    if price > row["max_price"]:
        row["max_price"] = price
    row["sum_price"] += price
    row["avg_price"] = row["sum_price"] // row["total_bids"]
    return row


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map(by_auction_day)
        .group_by_key(key_serde=serdes.json(), value_serde=serdes.long())
        .aggregate(initial, add)
        .to_stream()
        .to(output, key_serde=serdes.json(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    prices: dict[tuple[int, str], list[int]] = defaultdict(list)
    for bid in bids(events):
        prices[(bid["auction"], day(bid["dateTime"]))].append(bid["price"])
    result = {}
    for (auction, d), group in prices.items():
        ranks = [price_rank(p) for p in group]
        result[key_text({"auction": auction, "day": d})] = {
            "auction": auction, "day": d, "total_bids": len(group),
            "rank1_bids": ranks.count(0), "rank2_bids": ranks.count(1), "rank3_bids": ranks.count(2),
            "min_price": min(group), "max_price": max(group),
            "avg_price": sum(group) // len(group), "sum_price": sum(group),
        }  # fmt: skip
    return result
