"""Small, hand-shaped Nexmark event lists for the q11–q22 unit tests.

Events follow the format of docs/bench/nexmark.md (plain dicts with the spec's field names,
epoch-millisecond times, prices in cents). The lists are shaped to reach every branch of the
queries on a few hundred events: bids on both sides of a UTC midnight, in all three price
ranks, from a few bidders (so sessions and distinct counts repeat), with gaps longer than a
session's, on hot channels and on channels whose url carries a channel_id (or none), and some
bids before the auction they name.
"""

from __future__ import annotations

import random
from typing import Any

HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
FIRST_ID = 1000
#: 23:58:00 UTC on 2024-05-01: the events cross midnight.
START_MS = 1_714_607_880_000


def _word(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzcc") for _ in range(length))


def _url(rng: random.Random, channel_id: str | None) -> str:
    base = (
        f"https://www.nexmark.com/{_word(rng, 5)}/{_word(rng, 5)}/{_word(rng, 5)}/item.htm?query=1"
    )
    return base if channel_id is None else f"{base}&channel_id={channel_id}"


def generate(
    count: int, seed: int = 7, start_ms: int = START_MS, *, pauses: bool = True
) -> list[dict[str, Any]]:
    """``count`` events in time order: 1 person, 3 auctions and 46 bids in each 50.

    ``pauses``: now and then 10–30 s without events (longer than a session's gap); without
    them, a bid is never more than a few seconds from the auction it names, as the Nexmark
    generator keeps them.
    """
    rng = random.Random(seed)
    events: list[dict[str, Any]] = []
    now = start_ms
    persons: list[int] = []
    auctions: list[int] = []
    next_auction = FIRST_ID
    for n in range(count):
        # Mostly a few ms apart; now and then a pause longer than a session's gap.
        now += (
            rng.choice((0, 1, 3, 40, 250))
            if not pauses or rng.random() > 0.03
            else rng.randint(10_001, 30_000)
        )
        slot = n % 50
        if slot == 0:
            pid = FIRST_ID + len(persons)
            persons.append(pid)
            events.append({
                "id": pid, "name": f"{_word(rng, 6)} {_word(rng, 8)}",
                "emailAddress": f"{_word(rng, 7)}@{_word(rng, 5)}.com",
                "creditCard": " ".join(f"{rng.randint(0, 9999):04d}" for _ in range(4)),
                "city": rng.choice(["Phoenix", "Boise", "Kent"]), "state": rng.choice(["AZ", "ID", "WA"]),
                "dateTime": now, "extra": _word(rng, rng.randint(0, 12)),
            })  # fmt: skip
        elif slot in (1, 2, 3):
            aid = next_auction
            next_auction += 1
            auctions.append(aid)
            events.append({
                "id": aid, "itemName": _word(rng, 8), "description": _word(rng, 20),
                "initialBid": rng.randint(100, 10_000), "reserve": rng.randint(10_000, 20_000),
                "dateTime": now, "expires": now + rng.randint(1_000, 60_000),
                "seller": rng.choice(persons), "category": 10 + rng.randrange(5),
                "extra": _word(rng, rng.randint(0, 12)),
            })  # fmt: skip
        else:
            last = auctions[-1] if auctions else FIRST_ID
            # A few bids name an auction up to 3 ids ahead: it is created after the bid.
            auction = rng.randint(max(FIRST_ID, last - 8), last + (3 if rng.random() < 0.1 else 0))
            if rng.random() < 0.5:
                channel = rng.choice(HOT_CHANNELS)
                url = _url(rng, None)
            else:
                number = rng.randrange(50)
                channel = f"channel-{number}"
                url = _url(rng, str(number * 7) if rng.random() < 0.9 else None)
            price = rng.choice((
                rng.randint(1, 9_999), 10_000, rng.randint(10_001, 999_999), 1_000_000,
                rng.randint(1_000_001, 80_000_000),
            ))  # fmt: skip
            events.append({
                "auction": auction, "bidder": FIRST_ID + rng.randrange(12), "price": price,
                "channel": channel, "url": url, "dateTime": now,
                "extra": _word(rng, rng.randint(0, 12)),
            })  # fmt: skip
    return events
