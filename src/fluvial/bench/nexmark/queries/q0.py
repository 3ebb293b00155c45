"""Nexmark q0, pass-through: every bid, as the SQL selects it.

SQL::

    SELECT auction, bidder, price, dateTime, extra FROM bid

Mapping: ``map_values`` to the five columns; key and timestamp kept (the auction id, the bid's
time). The output key is the auction id; the value ``{"auction", "bidder", "dateTime",
"extra", "price"}``. Nothing differs from the SQL.

The final result "per key" of a stream that is not a table is every record: :func:`oracle`
returns, per output key, the list of values in input order (the order within a key is the
partition's, so it is deterministic).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")


def select(bid: dict[str, Any]) -> dict[str, Any]:
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "dateTime": bid["dateTime"],
        "extra": bid["extra"],
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map_values(select)
        .to(output)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if "bidder" in event:
            result.setdefault(str(event["auction"]), []).append(
                {column: event[column] for column in COLUMNS}
            )
    return result
