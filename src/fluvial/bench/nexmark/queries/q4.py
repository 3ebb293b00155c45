"""Nexmark q4, average price per category: the average winning price of the closed auctions
of each category.

SQL::

    SELECT Q.category, AVG(Q.final)
    FROM (SELECT MAX(B.price) AS final, A.category
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires
          GROUP BY A.id, A.category) Q
    GROUP BY Q.category

Mapping: the winning bid of each auction, emitted once when the auction closes (see
:mod:`~fluvial.bench.nexmark.queries._winning`: a windowed join of bids with their auctions, then
a processor that closes auctions on stream time), re-keyed by category (a repartition) and
aggregated. Key: the category; value ``{"avg", "count", "sum"}`` with ``avg = sum // count``.

What differs: the SQL revises an auction's maximum with every bid and averages over every
auction with a bid so far; here only closed auctions count, each once with its final winning
price, as the original Nexmark defines the query. The average is an integer (rounded down), and
sum and count are given so that it can be computed exactly.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import Materialized, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._winning import closed_auctions, closed_winners


def add(category: str, pair: dict[str, Any], total: dict[str, int]) -> dict[str, int]:
    count = total["count"] + 1
    amount = total["sum"] + pair["bid"]["price"]
    return {"avg": amount // count, "count": count, "sum": amount}


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    (
        closed_auctions(builder, topics, "q4", ("id", "expires", "category"))
        .group_by(
            lambda key, pair: str(pair["auction"]["category"]), key_serde=string, value_serde=json
        )
        .aggregate(
            lambda: {"avg": 0, "count": 0, "sum": 0},
            add,
            materialized=Materialized().with_(string, json),
        )
        .to_stream()
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]], partitions: int) -> dict[str, dict[str, int]]:
    prices: dict[str, list[int]] = defaultdict(list)
    for auction, bid in closed_winners(events, partitions).values():
        prices[str(auction["category"])].append(bid["price"])
    return {
        category: {"avg": sum(p) // len(p), "count": len(p), "sum": sum(p)}
        for category, p in prices.items()
    }
