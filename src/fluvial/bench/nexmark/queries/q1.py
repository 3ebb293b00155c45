"""Nexmark q1, currency conversion: every bid with its price in euros.

SQL::

    SELECT auction, bidder, 0.908 * price AS price, dateTime, extra FROM bid

Mapping: ``map_values``; key (auction id) and timestamp kept. The value is ``{"auction",
"bidder", "dateTime", "extra", "price"}``.

What differs: the SQL's ``DECIMAL(23, 3)`` price is written as an exact decimal string with
three decimals (``"1234.568"``), not as a JSON number: a float would round, and two systems
may print the same double differently.

:func:`oracle` returns, per key, the list of values in input order (a stream, not a table).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes


def euros(price: int) -> str:
    """``0.908 * price`` exactly, with three decimals."""
    thousandths = price * 908
    return f"{thousandths // 1000}.{thousandths % 1000:03d}"


def convert(bid: dict[str, Any]) -> dict[str, Any]:
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": euros(bid["price"]),
        "dateTime": bid["dateTime"],
        "extra": bid["extra"],
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map_values(convert)
        .to(output)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        if "bidder" in event:
            thousandths = event["price"] * 908
            result.setdefault(str(event["auction"]), []).append({
                "auction": event["auction"], "bidder": event["bidder"],
                "price": f"{thousandths // 1000}.{thousandths % 1000:03d}",
                "dateTime": event["dateTime"], "extra": event["extra"],
            })  # fmt: skip
    return result
