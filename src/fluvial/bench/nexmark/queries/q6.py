"""Nexmark q6, average selling price by seller: the average winning price of each seller's
last 10 closed auctions.

SQL (as Flink's Nexmark states it; Flink itself does not run it)::

    SELECT Q.seller, AVG(Q.price) OVER
        (PARTITION BY Q.seller ORDER BY Q.dateTime ROWS BETWEEN 10 PRECEDING AND CURRENT ROW)
    FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC)
                 AS rownum
          FROM (SELECT A.id, A.seller, B.price, B.dateTime FROM auction AS A, bid AS B
                WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
          WHERE rownum <= 1) AS Q

Mapping: the winning bid of each auction, emitted once when the auction closes (see
:mod:`~fluvial.bench.nexmark.queries._winning`), re-keyed by seller (a repartition) and
aggregated into the seller's last 10 closed auctions, ordered by expiry (then auction id), and
their sum. Key: the seller; value ``{"avg", "count", "sum"}`` over those (at most 10) auctions,
``avg = sum // count``.

What differs: "last 10" is the original Nexmark's definition (the SQL's window holds 11 rows)
and is ordered by when the auctions closed (their expiry) rather than by the winning bid's
time; the order is a property of the auctions, so it does not depend on the order in which
closed auctions reach the seller's partition. The average is an integer (rounded down).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import Materialized, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._winning import closed_auctions, closed_winners

LAST = 10


def add(seller: str, pair: dict[str, Any], last: dict[str, Any]) -> dict[str, Any]:
    auction = pair["auction"]
    entry = [auction["expires"], auction["id"], pair["bid"]["price"]]
    auctions = sorted([e for e in last["auctions"] if e[1] != entry[1]] + [entry])[-LAST:]
    return {"auctions": auctions, "sum": sum(e[2] for e in auctions)}


def result(last: dict[str, Any]) -> dict[str, int]:
    count = len(last["auctions"])
    return {"avg": last["sum"] // count, "count": count, "sum": last["sum"]}


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    (
        closed_auctions(builder, topics, "q6", ("id", "expires", "seller"))
        .group_by(
            lambda key, pair: str(pair["auction"]["seller"]), key_serde=string, value_serde=json
        )
        .aggregate(
            lambda: {"auctions": [], "sum": 0},
            add,
            materialized=Materialized().with_(string, json),
        )
        .to_stream()
        .map_values(result)
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]], partitions: int) -> dict[str, dict[str, int]]:
    closed: dict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for auction, bid in closed_winners(events, partitions).values():
        closed[str(auction["seller"])].append((auction["expires"], auction["id"], bid["price"]))
    out = {}
    for seller, auctions in closed.items():
        prices = [price for _expires, _id, price in sorted(auctions)[-LAST:]]
        out[seller] = {"avg": sum(prices) // len(prices), "count": len(prices), "sum": sum(prices)}
    return out
