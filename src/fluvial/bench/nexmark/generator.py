"""The Nexmark event generator: deterministic by seed, event times near now, fast enough to
pre-load millions of events.

Event ``n`` (from 0) is a person, an auction or a bid by its place in each group of 50 (1, 3
and 46 of them); its time is ``base_ms + n * 1000 // rate``. Ids follow the event numbers, so
the n-th person has id ``FIRST_PERSON_ID + n // 50``, and a new auction's seller, a bid's
auction and a bid's bidder are drawn among the people and auctions created so far:

- a bid names a hot auction (the first of the latest batch of 100 auctions) with probability
  1/2, else one of the last 100 auctions or of the next 10 not yet created;
- its bidder is the hot bidder (the second person of the latest batch of 100) with
  probability 3/4, else one of the last 1,000 people or of the next 10;
- an auction's seller is the hot seller (the first person of the latest batch) with
  probability 3/4, else drawn like a bidder; its category is one of 5 (ids 10 to 14);
- prices are ``round(10 ** (6 u) * 100)`` cents for a uniform ``u``: 1 dollar to 1 million,
  log-uniform; an auction's reserve is its initial bid plus another such price;
- an auction runs for 1 ms up to twice the time in which 100 new auctions appear (at most
  :data:`~fluvial.bench.nexmark.model.MAX_AUCTION_MS`);
- half of the bids come through one of 4 hot channels with its fixed url, the others through
  one of 10,000 numbered channels, whose url mostly carries a ``channel_id``;
- ``extra`` pads each event to its kind's average size (200, 500 and 100 bytes).

The same seed, base time and rate give the same events, byte for byte.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from fluvial.bench.nexmark import model
from fluvial.bench.nexmark.model import (
    AUCTION_ID_LEAD,
    AVG_AUCTION_BYTES,
    AVG_BID_BYTES,
    AVG_PERSON_BYTES,
    FIRST_AUCTION_ID,
    FIRST_CATEGORY_ID,
    FIRST_PERSON_ID,
    HOT_AUCTION_RATIO,
    HOT_BATCH,
    HOT_BIDDER_RATIO,
    HOT_SELLER_RATIO,
    NUM_ACTIVE_PEOPLE,
    NUM_CATEGORIES,
    NUM_IN_FLIGHT_AUCTIONS,
    PERSON_ID_LEAD,
    TOTAL_PROPORTION,
)

# Random text from random bytes: letters only, or letters with about one space in 13.
_LETTERS = bytes.maketrans(bytes(range(256)), bytes(ord("a") + i % 26 for i in range(256)))
_SPACED = bytes.maketrans(
    bytes(range(256)), bytes(32 if i < 20 else ord("a") + (i - 20) % 26 for i in range(256))
)
# Events until NUM_IN_FLIGHT_AUCTIONS more auctions have been created: an auction's average run.
_AUCTION_HORIZON_EVENTS = NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // model.AUCTION_PROPORTION


@dataclass(frozen=True)
class Event:
    """One generated event: its kind, record key, value (the JSON object) and timestamp."""

    kind: str
    key: str
    value: dict[str, Any]
    timestamp_ms: int


def default_base_ms(events: int, rate: int = model.DEFAULT_RATE) -> int:
    """A base time that ends the events a minute before now: times near the wall clock, none in
    the future (a broker refuses timestamps too far ahead, and deletes old segments by them)."""
    return int(time.time() * 1000) - events * 1000 // rate - 60_000


def _last_person(n: int) -> int:
    """The id (from 0) of the latest person created at or before event ``n``."""
    return n // TOTAL_PROPORTION


def _last_auction(n: int) -> int:
    """The id (from 0) of the latest auction created at or before event ``n``."""
    epoch, offset = divmod(n, TOTAL_PROPORTION)
    if offset < model.PERSON_PROPORTION:  # a person: the last auction is the previous group's
        return epoch * model.AUCTION_PROPORTION - 1
    offset = min(offset - model.PERSON_PROPORTION, model.AUCTION_PROPORTION - 1)
    return epoch * model.AUCTION_PROPORTION + offset


class Generator:
    """Nexmark events from event number 0 on; :meth:`events` yields them in order."""

    def __init__(self, *, seed: int = 0, base_ms: int, rate: int = model.DEFAULT_RATE) -> None:
        if rate < 1:
            raise ValueError(f"rate must be at least 1 event per second, got {rate}")
        self.seed = seed
        self.base_ms = base_ms
        self.rate = rate
        self._rng = random.Random(seed)
        # Fixed per seed, from a stream of their own: the urls of the hot channels.
        urls = random.Random(f"{seed}/hot-channels")
        self._hot_urls = tuple(self._url(urls) for _ in model.HOT_CHANNELS)
        self._channels: dict[int, tuple[str, str]] = {}

    def timestamp(self, n: int) -> int:
        return self.base_ms + n * 1000 // self.rate

    def events(self, count: int) -> Iterator[Event]:
        person, auction, bid = self.person, self.auction, self.bid
        for n in range(count):
            slot = n % TOTAL_PROPORTION
            if slot < model.PERSON_PROPORTION:
                value = person(n)
                yield Event(model.PERSON, str(value["id"]), value, value["dateTime"])
            elif slot < model.PERSON_PROPORTION + model.AUCTION_PROPORTION:
                value = auction(n)
                yield Event(model.AUCTION, str(value["id"]), value, value["dateTime"])
            else:
                value = bid(n)
                yield Event(model.BID, str(value["auction"]), value, value["dateTime"])

    # -- the three kinds ----------------------------------------------------------------------
    def person(self, n: int) -> dict[str, Any]:
        rng = self._rng
        name = f"{rng.choice(model.FIRST_NAMES)} {rng.choice(model.LAST_NAMES)}"
        email = f"{self._text(7)}@{self._text(5)}.com"
        card = " ".join(f"{rng.randrange(10_000):04d}" for _ in range(4))
        city = rng.choice(model.US_CITIES)
        state = rng.choice(model.US_STATES)
        size = 8 + len(name) + len(email) + len(card) + len(city) + len(state)
        return {
            "id": _last_person(n) + FIRST_PERSON_ID,
            "name": name,
            "emailAddress": email,
            "creditCard": card,
            "city": city,
            "state": state,
            "dateTime": self.timestamp(n),
            "extra": self._extra(size, AVG_PERSON_BYTES),
        }

    def auction(self, n: int) -> dict[str, Any]:
        rng = self._rng
        if rng.randrange(HOT_SELLER_RATIO) > 0:
            seller = _last_person(n) // HOT_BATCH * HOT_BATCH
        else:
            seller = self._some_person(n)
        category = FIRST_CATEGORY_ID + rng.randrange(NUM_CATEGORIES)
        initial_bid = self._price()
        now = self.timestamp(n)
        horizon_ms = self.timestamp(n + _AUCTION_HORIZON_EVENTS) - now
        length = min(1 + rng.randrange(max(2 * horizon_ms, 1)), model.MAX_AUCTION_MS)
        item = self._text(20, spaced=True)
        description = self._text(100, spaced=True)
        reserve = initial_bid + self._price()
        size = 8 + len(item) + len(description) + 40
        return {
            "id": _last_auction(n) + FIRST_AUCTION_ID,
            "itemName": item,
            "description": description,
            "initialBid": initial_bid,
            "reserve": reserve,
            "dateTime": now,
            "expires": now + length,
            "seller": seller + FIRST_PERSON_ID,
            "category": category,
            "extra": self._extra(size, AVG_AUCTION_BYTES),
        }

    def bid(self, n: int) -> dict[str, Any]:
        rng = self._rng
        if rng.randrange(HOT_AUCTION_RATIO) > 0:
            auction = _last_auction(n) // HOT_BATCH * HOT_BATCH
        else:
            latest = _last_auction(n)
            first = max(latest - NUM_IN_FLIGHT_AUCTIONS, 0)
            auction = first + rng.randrange(latest - first + 1 + AUCTION_ID_LEAD)
        if rng.randrange(HOT_BIDDER_RATIO) > 0:
            # The batch's second person: hot bidders and hot sellers are never the same.
            bidder = _last_person(n) // HOT_BATCH * HOT_BATCH + 1
        else:
            bidder = self._some_person(n)
        price = self._price()
        if rng.randrange(2) > 0:
            i = rng.randrange(len(model.HOT_CHANNELS))
            channel, url = model.HOT_CHANNELS[i], self._hot_urls[i]
        else:
            channel, url = self._channel(rng.randrange(model.CHANNELS))
        return {
            "auction": auction + FIRST_AUCTION_ID,
            "bidder": bidder + FIRST_PERSON_ID,
            "price": price,
            "channel": channel,
            "url": url,
            "dateTime": self.timestamp(n),
            "extra": self._extra(32, AVG_BID_BYTES),
        }

    # -- parts ----------------------------------------------------------------------------------
    def _some_person(self, n: int) -> int:
        """One of the active people, or of the next few not created yet (base 0)."""
        people = _last_person(n) + 1
        active = min(people, NUM_ACTIVE_PEOPLE)
        return people - active + self._rng.randrange(active + PERSON_ID_LEAD)

    def _price(self) -> int:
        return round(10.0 ** (self._rng.random() * 6.0) * 100.0)

    def _text(self, max_length: int, *, spaced: bool = False) -> str:
        """3 to ``max_length - 1`` random letters (with spaces, trimmed, if ``spaced``)."""
        length = 3 + self._rng.randrange(max_length - 3)
        raw = self._rng.randbytes(length)
        if spaced:
            return raw.translate(_SPACED).decode().strip()
        return raw.translate(_LETTERS).decode()

    def _extra(self, size: int, average: int) -> str:
        """Letters that bring an event of ``size`` bytes to ``average`` on average (±20 %)."""
        if size > average:
            return ""
        wanted = average - size
        delta = round(wanted * 0.2)
        length = wanted - delta + (self._rng.randrange(2 * delta) if delta else 0)
        return self._rng.randbytes(length).translate(_LETTERS).decode()

    def _channel(self, number: int) -> tuple[str, str]:
        """A numbered channel and its url, the same for a number throughout a run."""
        found = self._channels.get(number)
        if found is None:
            rng = random.Random(f"{self.seed}/channel/{number}")
            url = self._url(rng)
            if rng.randrange(10) > 0:
                url += f"&channel_id={_reversed_bits(number)}"
            found = self._channels[number] = (f"channel-{number}", url)
        return found

    @staticmethod
    def _url(rng: random.Random) -> str:
        parts = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(5))
                 for _ in range(3)]  # fmt: skip
        return f"https://www.nexmark.com/{'/'.join(parts)}/item.htm?query=1"


def _reversed_bits(number: int) -> int:
    """The magnitude of ``number``'s 32 bits reversed, read as a signed int."""
    reversed_ = int(f"{number:032b}"[::-1], 2)
    return abs(reversed_ - (1 << 32) if reversed_ >= 1 << 31 else reversed_)


def generate(
    count: int, *, seed: int = 0, base_ms: int, rate: int = model.DEFAULT_RATE
) -> list[dict[str, Any]]:
    """The first ``count`` events' values, in order: what an oracle reads."""
    return [e.value for e in Generator(seed=seed, base_ms=base_ms, rate=rate).events(count)]


def encode(value: dict[str, Any]) -> bytes:
    """An event's value as written to Kafka: compact JSON, sorted keys (fluvial's serdes.json)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@dataclass(frozen=True)
class Written:
    """What :func:`write` put on Kafka."""

    topics: dict[str, str]
    partitions: int
    events: int
    counts: dict[str, int]
    seed: int
    base_ms: int
    rate: int
    last_ms: int
    seconds: float

    @property
    def events_per_s(self) -> float:
        return self.events / max(self.seconds, 1e-9)

    def as_dict(self) -> dict[str, Any]:
        return {
            "topics": self.topics, "partitions": self.partitions, "events": self.events,
            "counts": self.counts, "seed": self.seed, "base_ms": self.base_ms, "rate": self.rate,
            "last_ms": self.last_ms, "seconds": round(self.seconds, 3),
            "events_per_s": round(self.events_per_s),
        }  # fmt: skip


def write(
    bootstrap: str,
    prefix: str,
    count: int,
    *,
    partitions: int,
    seed: int = 0,
    base_ms: int | None = None,
    rate: int = model.DEFAULT_RATE,
    client_config: dict[str, str] | None = None,
) -> Written:
    """Create the three topics (``partitions`` each) and write ``count`` events to them.

    Each record goes to the partition Kafka's Java partitioner gives its key, computed here
    (murmur2 on the key bytes) and passed to the producer, which then hashes nothing.
    """
    from confluent_kafka import Producer

    from fluvial.kafka.admin import TopicSpec, create_topics

    if count < 1 or partitions < 1:
        raise ValueError(f"need at least 1 event and 1 partition, got {count} and {partitions}")
    names = model.topics(prefix)
    settings = dict(client_config or {})
    create_topics(bootstrap, [TopicSpec(t, partitions) for t in names.values()],
                  admin_config=settings)  # fmt: skip
    base = default_base_ms(count, rate) if base_ms is None else base_ms
    producer = Producer(
        {
            **settings,
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 50,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1_048_576,
        }
    )
    produce, poll = producer.produce, producer.poll
    counts = dict.fromkeys(model.KINDS, 0)
    place = model.partition
    dumps, sort_keys = orjson.dumps, orjson.OPT_SORT_KEYS
    started = time.perf_counter()
    last_ms = base
    for event in Generator(seed=seed, base_ms=base, rate=rate).events(count):
        topic = names[event.kind]
        value = dumps(event.value, option=sort_keys)
        target = place(event.key, partitions)
        last_ms = event.timestamp_ms
        while True:
            try:
                produce(topic, value, event.key, partition=target, timestamp=last_ms)
                break
            except BufferError:
                poll(0.05)  # the local queue is full: let deliveries drain it
        counts[event.kind] += 1
    if producer.flush(300) != 0:
        raise RuntimeError("writing the Nexmark events did not finish within 300 s")
    seconds = time.perf_counter() - started
    return Written(names, partitions, count, counts, seed, base, rate, last_ms, seconds)
