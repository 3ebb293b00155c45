"""q11 (sessions per bidder) and q12 (processing-time windows per bidder) against their oracles."""

from __future__ import annotations

from collections import Counter

from fluvial.bench.nexmark.queries import q11, q12
from tests.bench.nexmark.drive import START_MS, final, generated, run


def bid(bidder: int, ms: int, auction: int = 1000) -> dict:
    return {"auction": auction, "bidder": bidder, "price": 100, "channel": "Google",
            "url": "https://x/a/b/c", "dateTime": ms, "extra": ""}  # fmt: skip


def test_q11_sessions_split_on_gaps_longer_than_10s_and_merge_on_a_bridging_bid():
    t = START_MS
    events = [bid(1, t), bid(1, t + 10_000), bid(2, t + 10_001), bid(1, t + 20_001),
              bid(1, t + 14_000)]  # fmt: skip
    records = run(q11, events)
    key = '{{"bidder":{b},"end":{e},"start":{s}}}'.format
    # [t, t+10000] (gap inclusive); t+20001 starts a session; t+14000 bridges the two.
    assert final(records) == {
        key(b=1, s=t, e=t + 20_001): {"bidder": 1, "bid_count": 4, "starttime": t, "endtime": t + 30_001},
        key(b=2, s=t + 10_001, e=t + 10_001): {
            "bidder": 2, "bid_count": 1, "starttime": t + 10_001, "endtime": t + 20_001},
    }  # fmt: skip
    # The replaced sessions end on a deletion.
    deleted = {r.key for r in records if r.value is None}
    assert {key(b=1, s=t, e=t + 10_000), key(b=1, s=t + 20_001, e=t + 20_001)} <= deleted
    assert final(records) == q11.oracle(events)


def test_q11_generated_events_match_the_oracle():
    events = generated(1000, rate=5)  # 200 s of bids: bidders pause past the gap
    expected = q11.oracle(events)
    assert max(Counter(row["bidder"] for row in expected.values()).values()) > 3
    assert final(run(q11, events)) == expected


class StepClock:
    """A processing-time clock that moves on by ``step_ms`` each time it is read."""

    def __init__(self, start_ms: int, step_ms: int) -> None:
        self.now_ms, self.step_ms = start_ms, step_ms

    def __call__(self) -> int:
        now, self.now_ms = self.now_ms, self.now_ms + self.step_ms
        return now


def test_q12_counts_bids_per_bidder_in_10s_windows_of_processing_time():
    # Event times are far apart (a minute); processing times are 3 s apart, from 100_000.
    events = [bid(b, START_MS + i * 60_000) for i, b in enumerate([1, 1, 2, 1, 1, 2])]
    rows = final(run(q12, events, clock=StepClock(100_000, 3_000)))
    # Read at 100, 103, 106, 109 (window [100, 110)), 112, 115 (window [110, 120)) seconds.
    assert rows == {
        '{"bidder":1,"end":110000,"start":100000}': {
            "bidder": 1, "bid_count": 3, "starttime": 100_000, "endtime": 110_000},
        '{"bidder":2,"end":110000,"start":100000}': {
            "bidder": 2, "bid_count": 1, "starttime": 100_000, "endtime": 110_000},
        '{"bidder":1,"end":120000,"start":110000}': {
            "bidder": 1, "bid_count": 1, "starttime": 110_000, "endtime": 120_000},
        '{"bidder":2,"end":120000,"start":110000}': {
            "bidder": 2, "bid_count": 1, "starttime": 110_000, "endtime": 120_000},
    }  # fmt: skip


def test_q12_window_counts_add_up_to_the_oracle_per_bidder():
    events = generated(600)
    rows = final(run(q12, events, clock=StepClock(1_000_000, 97)))
    assert len({row["starttime"] for row in rows.values()}) > 3
    assert q12.per_bidder(rows) == q12.oracle(events)


def test_q12_reads_the_wall_clock_by_default():
    import time

    before = time.time_ns() // 1_000_000
    rows = final(run(q12, [bid(1, START_MS)]))
    (row,) = rows.values()
    assert before - 10_000 < row["starttime"] <= time.time_ns() // 1_000_000
