"""q13 (side input), q14 (calculation), q15 and q16 (daily statistics) against their oracles."""

from __future__ import annotations

from fluvial.bench.nexmark.queries import q13, q14, q15, q16
from tests.bench.nexmark.drive import START_MS, TOPICS, final, generated, per_key, run


def bid(bidder: int, price: int, ms: int, auction: int = 1000, **fields) -> dict:
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google",
            "url": "https://x/a/b/c", "dateTime": ms, "extra": "", **fields}  # fmt: skip


def test_q15_counts_bids_and_distinct_bidders_and_auctions_per_day_and_rank():
    t = START_MS  # 23:58 on 2024-05-01
    events = [
        bid(1, 9_999, t, auction=1), bid(1, 10_000, t, auction=1), bid(2, 999_999, t, auction=2),
        bid(1, 9_999, t, auction=2), bid(3, 1_000_000, t, auction=1),
        bid(1, 5, t + 180_000, auction=1),  # 00:01 on 2024-05-02
    ]  # fmt: skip
    assert final(run(q15, events)) == {
        "2024-05-01": {
            "day": "2024-05-01",
            "total_bids": 5, "rank1_bids": 2, "rank2_bids": 2, "rank3_bids": 1,
            "total_bidders": 3, "rank1_bidders": 1, "rank2_bidders": 2, "rank3_bidders": 1,
            "total_auctions": 2, "rank1_auctions": 2, "rank2_auctions": 2, "rank3_auctions": 1,
        },
        "2024-05-02": {
            "day": "2024-05-02",
            "total_bids": 1, "rank1_bids": 1, "rank2_bids": 0, "rank3_bids": 0,
            "total_bidders": 1, "rank1_bidders": 1, "rank2_bidders": 0, "rank3_bidders": 0,
            "total_auctions": 1, "rank1_auctions": 1, "rank2_auctions": 0, "rank3_auctions": 0,
        },
    }  # fmt: skip
    assert final(run(q15, events)) == q15.oracle(events)


def test_q15_generated_events_match_the_oracle():
    events = generated(800)
    expected = q15.oracle(events)
    assert len(expected) == 2  # both sides of midnight
    assert final(run(q15, events)) == expected


def test_q16_keeps_statistics_per_channel_and_day_with_the_latest_minute():
    t = START_MS  # 23:58 on 2024-05-01
    events = [
        bid(1, 9_999, t + 61_000, channel="Apple"), bid(2, 5, t, channel="Apple"),
        bid(1, 20_000, t, channel="channel-3"), bid(1, 5, t + 121_000, channel="Apple"),
    ]  # fmt: skip
    result = final(run(q16, events))
    assert result['{"channel":"Apple","day":"2024-05-01"}'] == {
        "channel": "Apple", "day": "2024-05-01", "minute": "23:59",
        "total_bids": 2, "rank1_bids": 2, "rank2_bids": 0, "rank3_bids": 0,
        "total_bidders": 2, "rank1_bidders": 2, "rank2_bidders": 0, "rank3_bidders": 0,
        "total_auctions": 1, "rank1_auctions": 1, "rank2_auctions": 0, "rank3_auctions": 0,
    }  # fmt: skip
    assert result['{"channel":"Apple","day":"2024-05-02"}']["minute"] == "00:00"
    assert result['{"channel":"channel-3","day":"2024-05-01"}']["rank2_bidders"] == 1
    assert result == q16.oracle(events)


def test_q16_generated_events_match_the_oracle():
    events = generated(800)
    expected = q16.oracle(events)
    assert len(expected) > 20
    assert final(run(q16, events)) == expected


def side_input_rows():
    topic = q13.side_input_topic(TOPICS)
    return [(topic, key, value) for key, value in q13.side_input()]


def test_q13_side_input_topic_follows_the_prefix_unless_named():
    assert q13.side_input_topic({"bid": "run7-bid"}) == "run7-side-input"
    assert q13.side_input_topic({"bid": "run7-bid", "side_input": "rows"}) == "rows"
    assert q13.side_input()[:2] == [("0", "0"), ("1", "1")]
    assert len(q13.side_input()) == 10_000


def test_q13_joins_each_bid_with_the_side_input_row_of_its_auction_mod_10000():
    events = [bid(1, 10, START_MS, auction=12_345), bid(2, 20, START_MS + 1, auction=1000)]
    records = run(q13, events, before=side_input_rows())
    assert [(r.key, r.value) for r in records] == [
        ("12345", {"auction": 12_345, "bidder": 1, "price": 10, "dateTime": START_MS, "value": "2345"}),
        ("1000", {"auction": 1000, "bidder": 2, "price": 20, "dateTime": START_MS + 1, "value": "1000"}),
    ]  # fmt: skip


def test_q13_generated_events_match_the_oracle():
    events = generated(600)
    records = run(q13, events, before=side_input_rows())
    assert per_key(records) == q13.oracle(events)


def test_q14_keeps_the_price_band_with_exact_decimals_time_types_and_c_counts():
    hour = 3_600_000
    midnight = START_MS + 120_000  # 00:00 UTC on 2024-05-02
    events = [
        bid(1, 1_101_322, midnight + 8 * hour, extra="cacc"),  # 0.908 * p = 1000000.376: in
        bid(1, 1_101_321, midnight, extra="c"),  # 999999.468: out
        bid(1, 55_066_079, midnight + 19 * hour, extra=""),  # 49999999.732: in
        bid(1, 55_066_080, midnight, extra=""),  # 50000000.640: out
        bid(2, 2_000_000, midnight + 6 * hour + 59 * 60_000, extra="xyz"),
        bid(2, 2_000_000, midnight + 20 * hour),
    ]  # fmt: skip
    records = run(q14, events)
    assert [(r.value["price"], r.value["bidTimeType"], r.value["c_counts"]) for r in records] == [
        ("1000000.376", "dayTime", 3),
        ("49999999.732", "otherTime", 0),
        ("1816000.000", "nightTime", 0),
        ("1816000.000", "nightTime", 0),
    ]
    assert records[0].key == "1000"
    assert records[0].value == {
        "auction": 1000, "bidder": 1, "price": "1000000.376", "bidTimeType": "dayTime",
        "dateTime": midnight + 8 * hour, "extra": "cacc", "c_counts": 3,
    }  # fmt: skip


def test_q14_generated_events_match_the_oracle():
    events = generated(600) + generated(600, seed=8, base_ms=START_MS + 10 * 3_600_000)
    expected = q14.oracle(events)
    assert {v["bidTimeType"] for vs in expected.values() for v in vs} == {"dayTime", "nightTime"}
    assert per_key(run(q14, events)) == expected
