"""Columns several Nexmark queries derive from a bid, shared by their pipelines and oracles.

Plain Python, no fluvial imports: the oracles use these too. Every Kafka Streams twin computes
the same columns the same way (``dev.fluvial.reference.nexmark.Columns``):

- the SQL's ``DATE_FORMAT(dateTime, 'yyyy-MM-dd')``, ``DATE_FORMAT(dateTime, 'HH:mm')`` and
  ``HOUR(dateTime)`` are read in UTC (the generator's times are epoch milliseconds);
- the price ranks of q15–q17: rank 1 below 10,000, rank 2 below 1,000,000, rank 3 above.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterable, Iterator
from typing import Any

MS_PER_DAY = 86_400_000
MS_PER_HOUR = 3_600_000
MS_PER_MINUTE = 60_000

#: Upper bounds (exclusive) of price ranks 1 and 2; rank 3 is everything above.
RANK1_BELOW = 10_000
RANK2_BELOW = 1_000_000

_days: dict[int, str] = {}


def day(date_time_ms: int) -> str:
    """``yyyy-MM-dd`` of an epoch-millisecond time, in UTC."""
    epoch_day = date_time_ms // MS_PER_DAY
    text = _days.get(epoch_day)
    if text is None:
        text = (datetime.date(1970, 1, 1) + datetime.timedelta(days=epoch_day)).isoformat()
        _days[epoch_day] = text
    return text


def minute(date_time_ms: int) -> str:
    """``HH:mm`` of an epoch-millisecond time, in UTC."""
    minutes = date_time_ms // MS_PER_MINUTE % 1440
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def hour(date_time_ms: int) -> int:
    """The hour of the day (0–23) of an epoch-millisecond time, in UTC."""
    return date_time_ms // MS_PER_HOUR % 24


def price_rank(price: int) -> int:
    """0, 1 or 2 for the SQL's rank 1, 2 or 3 (the index into a row of three counts)."""
    if price < RANK1_BELOW:
        return 0
    return 1 if price < RANK2_BELOW else 2


def bids(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The bids among generated events (a bid is the only event with a ``bidder``)."""
    return (event for event in events if "bidder" in event)


def auctions(events: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The auctions among generated events (the only events with a ``seller``)."""
    return (event for event in events if "seller" in event)


def key_text(key: Any) -> str:
    """An output key as the text on the topic: a string as is, anything else compact JSON.

    The bytes are those of fluvial's ``serdes.json()`` (sorted keys, no spaces), so an oracle's
    keys compare equal to the UTF-8 keys read back from an output topic.
    """
    if isinstance(key, str):
        return key
    return json.dumps(key, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def per_key(rows: Iterable[tuple[str, Any]]) -> dict[str, list[Any]]:
    """A stream's rows as its final result: per key, every value in order.

    A stream that is not a table has no last value per key; its result per key is all of its
    records. Their order within a key is deterministic (one key, one partition, read in
    order), so a run's output compares equal as a whole.
    """
    result: dict[str, list[Any]] = {}
    for key, value in rows:
        result.setdefault(key, []).append(value)
    return result
