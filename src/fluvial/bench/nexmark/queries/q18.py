"""Nexmark q18, last bid: each bidder's latest bid on each auction.

SQL (Flink's Nexmark)::

    SELECT auction, bidder, price, channel, url, dateTime, extra
    FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction ORDER BY dateTime DESC)
                    AS rank_number
          FROM bid)
    WHERE rank_number <= 1

Mapping: bids re-keyed by ``{"auction", "bidder"}`` (a repartition), then ``reduce`` keeping
the bid with the later ``dateTime``, so the table holds each pair's last bid.

Output: key ``{"auction": a, "bidder": b}`` (compact JSON); value the bid, as read.

What differs from the SQL: bids of one pair with the same ``dateTime`` are not ordered by the
SQL; here the one read later wins. Both engines read a pair's bids in one order (they share
an auction, so one input partition, in offset order), so the result is deterministic. Every
change of a pair's last bid is emitted at once (coalesced per commit with the record cache).

:func:`oracle` returns ``{key text: bid}``.
"""

from __future__ import annotations

from typing import Any

from fluvial import KeyValue, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, key_text


def by_pair(auction: str, bid: dict[str, Any]) -> KeyValue[dict[str, int], dict[str, Any]]:
    return KeyValue({"auction": bid["auction"], "bidder": bid["bidder"]}, bid)


def later(last: dict[str, Any], bid: dict[str, Any]) -> dict[str, Any]:
    return bid if bid["dateTime"] >= last["dateTime"] else last


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map(by_pair)
        .group_by_key(key_serde=serdes.json(), value_serde=serdes.json())
        .reduce(later)
        .to_stream()
        .to(output, key_serde=serdes.json(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    last: dict[tuple[int, int], dict[str, Any]] = {}
    for bid in bids(events):  # events in generation order: each auction's in offset order
        pair = (bid["auction"], bid["bidder"])
        if pair not in last or bid["dateTime"] >= last[pair]["dateTime"]:
            last[pair] = bid
    return {key_text({"auction": a, "bidder": b}): bid for (a, b), bid in last.items()}
