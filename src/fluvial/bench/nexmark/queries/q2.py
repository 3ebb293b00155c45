"""Nexmark q2, selection: the bids on every 123rd auction.

SQL::

    SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0

Mapping: ``filter`` then ``map_values``; key (auction id) and timestamp kept. The value is
``{"auction", "price"}``. Nothing differs from the SQL.

:func:`oracle` returns, per key, the list of values in input order (a stream, not a table).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes

MODULUS = 123


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, bid: bid["auction"] % MODULUS == 0)
        .map_values(lambda bid: {"auction": bid["auction"], "price": bid["price"]})
        .to(output)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if "bidder" in event and event["auction"] % MODULUS == 0:
            result.setdefault(str(event["auction"]), []).append(
                {"auction": event["auction"], "price": event["price"]}
            )
    return result
