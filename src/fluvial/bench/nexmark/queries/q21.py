"""Nexmark q21, add channel id: a channel id from the channel's name or the url's parameter.

SQL (Flink's Nexmark)::

    SELECT auction, bidder, price, channel,
           CASE WHEN lower(channel) = 'apple' THEN '0'
                WHEN lower(channel) = 'google' THEN '1'
                WHEN lower(channel) = 'facebook' THEN '2'
                WHEN lower(channel) = 'baidu' THEN '3'
                ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) END AS channel_id
    FROM bid
    WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
       OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')

Mapping: ``map_values`` to the row (``None`` where the bid has no channel id), then ``filter``
the ``None`` out; keys stay (the bid's auction id).

Output value ``{"auction", "bidder", "price", "channel", "channel_id"}``.

What differs from the SQL: nothing. The regular expression is the SQL's, searched as Java's
``Matcher.find`` does (the first match); ``lower`` is plain case folding of the ASCII names.

:func:`oracle` returns, per key, the list of rows in input order (one key's rows are
read from one partition, in order, so a run gives them in that order too).
"""

from __future__ import annotations

import re
from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, per_key

KNOWN_CHANNELS = {"apple": "0", "google": "1", "facebook": "2", "baidu": "3"}
_CHANNEL_ID = re.compile(r"(&|^)channel_id=([^&]*)")


def channel_id(bid: dict[str, Any]) -> str | None:
    known = KNOWN_CHANNELS.get(bid["channel"].lower())
    if known is not None:
        return known
    found = _CHANNEL_ID.search(bid["url"])
    return None if found is None else found.group(2)


def row(bid: dict[str, Any]) -> dict[str, Any] | None:
    """The output row, or ``None`` for a bid the query leaves out."""
    ident = channel_id(bid)
    if ident is None:
        return None
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "channel": bid["channel"],
        "channel_id": ident,
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .map_values(row)
        .filter(lambda auction, value: value is not None)
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    rows = ((str(bid["auction"]), row(bid)) for bid in bids(events))
    return per_key((key, value) for key, value in rows if value is not None)
