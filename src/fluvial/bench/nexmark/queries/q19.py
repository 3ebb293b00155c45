"""Nexmark q19, auction top 10: the ten highest bids of each auction.

SQL (Flink's Nexmark)::

    SELECT * FROM
      (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC) AS rank_number
       FROM bid)
    WHERE rank_number <= 10

Mapping: bids are already keyed by auction, so ``group_by_key`` needs no repartition; an
``aggregate`` keeps the auction's top ten, highest price first, each bid with its
``rank_number`` (1–10).

Output: key the auction id (plain text, as the input); value the JSON list of the top bids,
each the bid's fields plus ``rank_number``.

What differs from the SQL:

- The SQL's result is a table of (auction, rank) rows; here each auction's ten rows travel as
  one value, so a new bid costs one output record, not one per rank it moves.
- Bids of equal price are not ordered by the SQL; here the one read first ranks higher (both
  engines read an auction's bids in one order: its partition's).
- Every bid emits its auction's list, even one that does not enter the top ten (coalesced per
  commit with the record cache).

:func:`oracle` returns ``{auction text: list}``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids

TOP = 10


def enter(auction: str, bid: dict[str, Any], top: list[dict[str, Any]]) -> list[dict[str, Any]]:
    price = bid["price"]
    if len(top) >= TOP and price <= top[-1]["price"]:
        return top
    at = len(top)
    while at > 0 and top[at - 1]["price"] < price:  # after every bid of an equal price
        at -= 1
    ranked = top[:at]
    ranked.append({**bid, "rank_number": at + 1})
    for below in top[at : TOP - 1]:
        ranked.append({**below, "rank_number": below["rank_number"] + 1})
    return ranked


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .group_by_key()
        .aggregate(list, enter)
        .to_stream()
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    per_auction: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for bid in bids(events):
        per_auction[bid["auction"]].append(bid)
    result = {}
    for auction, group in per_auction.items():
        # A stable sort: bids of equal price keep their input order.
        ranked = sorted(group, key=lambda bid: -bid["price"])[:TOP]
        result[str(auction)] = [{**bid, "rank_number": i} for i, bid in enumerate(ranked, 1)]
    return result
