"""The Nexmark generator: deterministic, in the specification's proportions and distributions."""

from __future__ import annotations

import json
from collections import Counter

from fluvial.bench.nexmark import model
from fluvial.bench.nexmark.generator import Generator, encode, generate

BASE = 1_700_000_000_000


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_events() -> None:
    first = [encode(v) for v in generate(2_000, seed=3, base_ms=BASE)]
    again = [encode(v) for v in generate(2_000, seed=3, base_ms=BASE)]
    other = [encode(v) for v in generate(2_000, seed=4, base_ms=BASE)]
    assert first == again
    assert first != other
    # What fluvial's serdes.json() writes: compact, sorted keys.
    assert (
        first[7] == json.dumps(json.loads(first[7]), separators=(",", ":"), sort_keys=True).encode()
    )


def test_proportions_ids_and_times_follow_the_specification() -> None:
    events = list(Generator(seed=1, base_ms=BASE, rate=500).events(10_000))
    kinds = Counter(e.kind for e in events)
    assert kinds == {"person": 200, "auction": 600, "bid": 9_200}
    # One event every 2 ms at 500 events/s, from the base time on, never going back.
    assert [e.timestamp_ms for e in events[:3]] == [BASE, BASE + 2, BASE + 4]
    assert all(e.value["dateTime"] == e.timestamp_ms for e in events)
    people = [e.value["id"] for e in events if e.kind == "person"]
    auctions = [e.value["id"] for e in events if e.kind == "auction"]
    assert people == list(range(1000, 1200))
    assert auctions == list(range(1000, 1600))
    for e in events:
        assert e.key == model.key(e.value)
        assert model.kind(e.value) == e.kind


def test_hot_auctions_bidders_and_sellers_and_the_distributions() -> None:
    events = generate(50_000, seed=2, base_ms=BASE)
    bids = [v for v in events if "bidder" in v]
    auctions = [v for v in events if "seller" in v]
    people = {v["id"] for v in events if "emailAddress" in v}
    # Half of the bids are for the hot auction of their time, so a few auctions get most bids.
    per_auction = Counter(b["auction"] for b in bids)
    top = sum(n for _, n in per_auction.most_common(len(auctions) // 100 + 1))
    assert 0.45 < top / len(bids) < 0.6
    # Three quarters of bids come from hot bidders, three quarters of auctions from hot sellers.
    hot_bidders = sum(1 for b in bids if (b["bidder"] - 1000) % 100 == 1)
    assert 0.72 < hot_bidders / len(bids) < 0.8
    hot_sellers = sum(1 for a in auctions if (a["seller"] - 1000) % 100 == 0)
    assert 0.72 < hot_sellers / len(auctions) < 0.8
    # Bids name auctions that exist or are about to (at most 10 ids ahead).
    latest = 999
    for v in events:
        if "seller" in v:
            latest = v["id"]
        elif "bidder" in v:
            assert 1000 <= v["auction"] <= latest + 11
            assert v["bidder"] <= max(people) + 11
    prices = [b["price"] for b in bids]
    assert min(prices) >= 100 and max(prices) <= 100_000_000
    # Log-uniform over six decades: about a sixth of the prices in each.
    assert 0.13 < sum(1 for p in prices if p < 1_000) / len(prices) < 0.2
    assert {a["category"] for a in auctions} == {10, 11, 12, 13, 14}
    for a in auctions:
        assert a["dateTime"] < a["expires"] <= a["dateTime"] + model.MAX_AUCTION_MS
        assert a["reserve"] > a["initialBid"]
    channels = Counter(b["channel"] for b in bids)
    assert 0.45 < sum(channels[c] for c in model.HOT_CHANNELS) / len(bids) < 0.55
    # A channel keeps its url.
    urls = {b["channel"]: b["url"] for b in bids}
    assert all(b["url"] == urls[b["channel"]] for b in bids)
    # Sizes near the specification's averages (the JSON adds the field names).
    bid_bytes = sum(len(encode(b)) for b in bids) / len(bids)
    assert 200 < bid_bytes < 300


def test_long_auctions_are_cut_at_the_longest_join_window() -> None:
    # At 100 events/s the specification's lengths reach 33 s; none passes MAX_AUCTION_MS.
    auctions = [v for v in generate(20_000, seed=5, base_ms=BASE, rate=100) if "seller" in v]
    lengths = [a["expires"] - a["dateTime"] for a in auctions]
    assert max(lengths) == model.MAX_AUCTION_MS
    assert min(lengths) >= 1
