"""q17 (auction statistics), q18 (last bid), q19 (top 10), q20 (join with category-10
auctions), q21 (channel id) and q22 (url directories) against their oracles."""

from __future__ import annotations

from fluvial.bench.nexmark.queries import q17, q18, q19, q20, q21, q22
from tests.bench.nexmark.drive import START_MS, final, generated, per_key, run


def bid(bidder: int, price: int, ms: int, auction: int = 1000, **fields) -> dict:
    return {"auction": auction, "bidder": bidder, "price": price, "channel": "Google",
            "url": "https://x/a/b/c", "dateTime": ms, "extra": "", **fields}  # fmt: skip


def auction(id_: int, category: int, ms: int) -> dict:
    return {"id": id_, "itemName": "lamp", "description": "old", "initialBid": 10,
            "reserve": 20, "dateTime": ms, "expires": ms + 5_000, "seller": 1001,
            "category": category, "extra": "x"}  # fmt: skip


def test_q17_keeps_counts_min_max_average_and_sum_per_auction_and_day():
    t = START_MS  # 23:58 on 2024-05-01
    events = [bid(1, 9_999, t), bid(2, 20_000, t + 1), bid(1, 3_000_001, t + 2),
              bid(1, 7, t + 180_000), bid(1, 8, t, auction=1001)]  # fmt: skip
    assert final(run(q17, events)) == {
        '{"auction":1000,"day":"2024-05-01"}': {
            "auction": 1000, "day": "2024-05-01", "total_bids": 3,
            "rank1_bids": 1, "rank2_bids": 1, "rank3_bids": 1, "min_price": 9_999,
            "max_price": 3_000_001, "avg_price": 1_010_000, "sum_price": 3_030_000},
        '{"auction":1000,"day":"2024-05-02"}': {
            "auction": 1000, "day": "2024-05-02", "total_bids": 1,
            "rank1_bids": 1, "rank2_bids": 0, "rank3_bids": 0, "min_price": 7,
            "max_price": 7, "avg_price": 7, "sum_price": 7},
        '{"auction":1001,"day":"2024-05-01"}': {
            "auction": 1001, "day": "2024-05-01", "total_bids": 1,
            "rank1_bids": 1, "rank2_bids": 0, "rank3_bids": 0, "min_price": 8,
            "max_price": 8, "avg_price": 8, "sum_price": 8},
    }  # fmt: skip


def test_q17_average_truncates_as_the_sql_bigint_average():
    events = [bid(1, 10, START_MS), bid(1, 11, START_MS + 1)]
    (row,) = final(run(q17, events)).values()
    assert (row["avg_price"], row["sum_price"], row["total_bids"]) == (10, 21, 2)


def test_q17_generated_events_match_the_oracle():
    events = generated(800)
    assert final(run(q17, events)) == q17.oracle(events)


def test_q18_keeps_the_latest_bid_of_each_bidder_on_each_auction():
    t = START_MS
    events = [bid(1, 10, t + 5), bid(1, 20, t), bid(2, 30, t), bid(1, 40, t + 5),
              bid(1, 50, t, auction=1001)]  # fmt: skip
    assert final(run(q18, events)) == {
        # t + 5 twice: the later read wins; the earlier-timed bid (20) never does.
        '{"auction":1000,"bidder":1}': bid(1, 40, t + 5),
        '{"auction":1000,"bidder":2}': bid(2, 30, t),
        '{"auction":1001,"bidder":1}': bid(1, 50, t, auction=1001),
    }
    assert final(run(q18, events)) == q18.oracle(events)


def test_q18_generated_events_match_the_oracle():
    events = generated(800)
    assert final(run(q18, events)) == q18.oracle(events)


def test_q19_keeps_ten_highest_bids_ranked_equal_prices_in_arrival_order():
    prices = [5, 50, 7, 50, 1, 90, 3, 8, 8, 60, 2, 70, 4]
    events = [bid(i, p, START_MS + i) for i, p in enumerate(prices)]
    (top,) = final(run(q19, events)).values()
    assert [(b["price"], b["bidder"], b["rank_number"]) for b in top] == [
        (90, 5, 1), (70, 11, 2), (60, 9, 3), (50, 1, 4), (50, 3, 5), (8, 7, 6), (8, 8, 7),
        (7, 2, 8), (5, 0, 9), (4, 12, 10),
    ]  # fmt: skip
    assert top[0] == {**bid(5, 90, START_MS + 5), "rank_number": 1}
    assert final(run(q19, events)) == q19.oracle(events)


def test_q19_generated_events_match_the_oracle():
    events = generated(800)
    expected = q19.oracle(events)
    assert any(len(top) == 10 for top in expected.values())
    assert final(run(q19, events)) == expected


def test_q20_joins_bids_with_category_10_auctions_created_before_or_just_after_them():
    t = START_MS
    events = [
        auction(1000, 10, t), bid(1, 5, t + 1, auction=1000),
        bid(2, 6, t + 2, auction=1001),  # its auction comes after it
        auction(1001, 10, t + 3), auction(1002, 11, t + 4), bid(3, 7, t + 5, auction=1002),
        bid(4, 8, t + 6, auction=1003),  # no such auction
    ]  # fmt: skip
    records = run(q20, events)
    assert [(r.key, r.value["bidder"], r.value["auction_dateTime"]) for r in records] == [
        ("1000", 1, t),
        ("1001", 2, t + 3),
    ]
    assert records[0].value == {
        "auction": 1000, "bidder": 1, "price": 5, "channel": "Google", "url": "https://x/a/b/c",
        "bid_dateTime": t + 1, "bid_extra": "", "itemName": "lamp", "description": "old",
        "initialBid": 10, "reserve": 20, "auction_dateTime": t, "expires": t + 5_000,
        "seller": 1001, "category": 10, "auction_extra": "x",
    }  # fmt: skip
    assert per_key(records) == q20.oracle(events)


def test_q20_generated_events_match_the_oracle():
    events = generated(1500)
    expected = q20.oracle(events)
    assert sum(map(len, expected.values())) > 40
    assert per_key(run(q20, events)) == expected


def test_q21_channel_id_from_the_known_channels_or_the_url_parameter():
    events = [
        bid(1, 1, START_MS, channel="aPPle", url="https://x/?channel_id=9"),
        bid(2, 1, START_MS, channel="Baidu"),
        bid(3, 1, START_MS, channel="channel-7", url="https://x/a?query=1&channel_id=77&b=2"),
        bid(4, 1, START_MS, channel="channel-8", url="https://x/a?query=1"),  # left out
        bid(5, 1, START_MS, channel="channel-9", url="channel_id=&x"),  # empty, at the start
        bid(6, 1, START_MS, channel="channel-9", url="https://x/a?xchannel_id=5"),  # left out
    ]  # fmt: skip
    records = run(q21, events)
    assert [(r.value["bidder"], r.value["channel_id"]) for r in records] == [
        (1, "0"),
        (2, "3"),
        (3, "77"),
        (5, ""),
    ]
    assert records[2].value == {
        "auction": 1000,
        "bidder": 3,
        "price": 1,
        "channel": "channel-7",
        "channel_id": "77",
    }
    assert per_key(records) == q21.oracle(events)


def test_q21_generated_events_match_the_oracle():
    events = generated(600)
    expected = q21.oracle(events)
    rows = sum(map(len, expected.values()))
    assert 0 < rows < len([e for e in events if "bidder" in e])  # some are left out
    assert per_key(run(q21, events)) == expected


def test_q22_splits_the_url_into_directories_null_past_its_end():
    events = [
        bid(1, 1, START_MS, url="https://www.nexmark.com/abc/de/f/item.htm?query=1"),
        bid(2, 1, START_MS, url="https://host/only"),
        bid(3, 1, START_MS, url="a//b/c//"),
    ]
    records = run(q22, events)
    assert [(r.value["dir1"], r.value["dir2"], r.value["dir3"]) for r in records] == [
        ("abc", "de", "f"),
        ("only", None, None),
        ("c", "", ""),
    ]
    assert records[0].value == {
        "auction": 1000, "bidder": 1, "price": 1, "channel": "Google",
        "dir1": "abc", "dir2": "de", "dir3": "f",
    }  # fmt: skip


def test_q22_generated_events_match_the_oracle():
    events = generated(600)
    assert per_key(run(q22, events)) == q22.oracle(events)
