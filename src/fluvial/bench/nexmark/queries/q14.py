"""Nexmark q14, calculation: bids in a price band, with a time-of-day type and a count of 'c's.

SQL (Flink's Nexmark)::

    SELECT auction, bidder, 0.908 * price AS price,
           CASE WHEN HOUR(dateTime) >= 8 AND HOUR(dateTime) <= 18 THEN 'dayTime'
                WHEN HOUR(dateTime) <= 6 OR HOUR(dateTime) >= 20 THEN 'nightTime'
                ELSE 'otherTime' END AS bidTimeType,
           dateTime, extra, count_char(extra, 'c') AS c_counts
    FROM bid
    WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000

Mapping: ``filter`` then ``map_values``; keys stay (the bid's auction id):

- value ``{"auction", "bidder", "price", "bidTimeType", "dateTime", "extra", "c_counts"}``.

What differs from the SQL:

- ``price`` is the SQL's ``DECIMAL(23, 3)`` as exact decimal text (``"1234567.890"``), computed
  in integers (``908 * price`` thousandths), as is the filter: no float rounds a bid in or out,
  and both engines write the same bytes.
- ``HOUR`` is read in UTC (see ``_columns``).

:func:`oracle` returns, per key, the list of rows in input order (one key's rows are
read from one partition, in order, so a run gives them in that order too).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, hour, per_key

#: 0.908 as thousandths, and the band's bounds times 1000.
FACTOR_THOUSANDTHS = 908
LOW_THOUSANDTHS = 1_000_000 * 1000
HIGH_THOUSANDTHS = 50_000_000 * 1000


def in_band(bid: dict[str, Any]) -> bool:
    return LOW_THOUSANDTHS < FACTOR_THOUSANDTHS * bid["price"] < HIGH_THOUSANDTHS


def bid_time_type(date_time_ms: int) -> str:
    h = hour(date_time_ms)
    if 8 <= h <= 18:
        return "dayTime"
    if h <= 6 or h >= 20:
        return "nightTime"
    return "otherTime"


def row(bid: dict[str, Any]) -> dict[str, Any]:
    thousandths = FACTOR_THOUSANDTHS * bid["price"]
    extra = bid["extra"]
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": f"{thousandths // 1000}.{thousandths % 1000:03d}",
        "bidTimeType": bid_time_type(bid["dateTime"]),
        "dateTime": bid["dateTime"],
        "extra": extra,
        "c_counts": extra.count("c"),
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda auction, bid: in_band(bid))
        .map_values(row)
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return per_key((str(bid["auction"]), row(bid)) for bid in bids(events) if in_band(bid))
