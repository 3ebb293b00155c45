"""q11 (sessions per bidder) and q12 (processing-time windows per bidder) against their oracles."""

from __future__ import annotations

from fluvial.bench.nexmark.queries import q11
from tests.bench.nexmark.drive import final, run
from tests.bench.nexmark.events import START_MS, generate


def bid(bidder: int, ms: int, auction: int = 1000) -> dict:
    return {"auction": auction, "bidder": bidder, "price": 100, "channel": "Google",
            "url": "https://x/a/b/c", "dateTime": ms, "extra": ""}  # fmt: skip


def test_q11_sessions_split_on_gaps_longer_than_10s_and_merge_on_a_bridging_bid():
    t = START_MS
    events = [bid(1, t), bid(1, t + 10_000), bid(2, t + 10_001), bid(1, t + 20_001),
              bid(1, t + 14_000)]  # fmt: skip
    records = run(q11, events)
    key = '{{"bidder":1,"end":{e},"start":{s}}}'.format
    # [t, t+10000] (gap inclusive); t+20001 starts a session; t+14000 bridges the two.
    assert final(records) == {
        key(s=t, e=t + 20_001): {"bidder": 1, "bid_count": 4, "starttime": t, "endtime": t + 30_001},
        '{"bidder":2,"end":%d,"start":%d}' % (t + 10_001, t + 10_001): {
            "bidder": 2, "bid_count": 1, "starttime": t + 10_001, "endtime": t + 20_001},
    }  # fmt: skip
    # The replaced sessions end on a deletion.
    deleted = {r.key for r in records if r.value is None}
    assert {key(s=t, e=t + 10_000), key(s=t + 20_001, e=t + 20_001)} <= deleted
    assert final(records) == q11.oracle(events)


def test_q11_generated_events_match_the_oracle():
    events = generate(600)
    assert final(run(q11, events)) == q11.oracle(events)
