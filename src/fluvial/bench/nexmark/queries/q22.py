"""Nexmark q22, url directories: the first three directories of each bid's url.

SQL (Flink's Nexmark)::

    SELECT auction, bidder, price, channel,
           SPLIT_INDEX(url, '/', 3) AS dir1,
           SPLIT_INDEX(url, '/', 4) AS dir2,
           SPLIT_INDEX(url, '/', 5) AS dir3
    FROM bid

Mapping: ``map_values``; keys stay (the bid's auction id). The url is split on every ``/``,
empty pieces kept (``https://host/a/b/c`` gives ``https:``, ``""``, ``host``, ``a``, …), and
pieces 3, 4 and 5 are the directories; a url with fewer pieces gives ``null`` there, as
``SPLIT_INDEX`` past the end does.

Output value ``{"auction", "bidder", "price", "channel", "dir1", "dir2", "dir3"}``.

What differs from the SQL: nothing.

:func:`oracle` returns, per key, the list of rows in input order (one key's rows are
read from one partition, in order, so a run gives them in that order too).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, per_key


def row(bid: dict[str, Any]) -> dict[str, Any]:
    pieces = bid["url"].split("/")
    count = len(pieces)
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "channel": bid["channel"],
        "dir1": pieces[3] if count > 3 else None,
        "dir2": pieces[4] if count > 4 else None,
        "dir3": pieces[5] if count > 5 else None,
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map_values(row)
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return per_key((str(bid["auction"]), row(bid)) for bid in bids(events))
