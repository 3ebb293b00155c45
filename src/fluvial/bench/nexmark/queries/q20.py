"""Nexmark q20, expand bid with auction: bids joined with their auction, for category 10.

SQL (Flink's Nexmark)::

    SELECT auction, bidder, price, channel, url, B.dateTime, B.extra,
           itemName, description, initialBid, reserve, A.dateTime, expires, seller, category,
           A.extra
    FROM bid AS B INNER JOIN auction AS A ON B.auction = A.id
    WHERE A.category = 10

Mapping: auctions filtered to category 10, then a stream-stream inner join of the bids with
them by key (both topics are keyed by auction id and co-partitioned: no repartition). A join
needs a window; it is ``JOIN_MS`` (20 s) either way, with 10 s of grace. The generator has a
bid name an auction at most 100 auctions older or 10 newer than the latest (about 1,670
events back or 170 ahead: 1.7 s and 0.17 s at its default 1,000 events/s), so every pair is
closer than 20 s at any rate above 84 events/s, and within that the join finds every pair
the SQL's unbounded join finds. A pair further apart would not be joined.

Output: key the auction id (plain text, as the input); value ``{"auction", "bidder", "price",
"channel", "url", "bid_dateTime", "bid_extra", "itemName", "description", "initialBid",
"reserve", "auction_dateTime", "expires", "seller", "category", "auction_extra"}`` (the column
names of Flink's Nexmark sink).

What differs from the SQL: the time bound above; rows come when the later of the two records
is processed, as the SQL's do.

:func:`oracle` returns the rows of the SQL's unbounded join, per key, in bid order: a run
gives them in that order too (one key's records are read from one partition, in order; bids
read before their auction come out when it does, in time order, ahead of later bids).
"""

from __future__ import annotations

from typing import Any

from fluvial import JoinWindows, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import auctions, bids, per_key

CATEGORY = 10
#: How far apart in event time a bid and its auction may be and still join (the generator keeps
#: them under 1,700 events apart).
JOIN_MS = 20_000
GRACE_MS = 10_000


def row(bid: dict[str, Any], auction: dict[str, Any]) -> dict[str, Any]:
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "channel": bid["channel"],
        "url": bid["url"],
        "bid_dateTime": bid["dateTime"],
        "bid_extra": bid["extra"],
        "itemName": auction["itemName"],
        "description": auction["description"],
        "initialBid": auction["initialBid"],
        "reserve": auction["reserve"],
        "auction_dateTime": auction["dateTime"],
        "expires": auction["expires"],
        "seller": auction["seller"],
        "category": auction["category"],
        "auction_extra": auction["extra"],
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    json, string = serdes.json(), serdes.string()
    category_10 = builder.stream(topics["auction"], key_serde=string, value_serde=json).filter(
        lambda id_, auction: auction["category"] == CATEGORY
    )
    (
        builder.stream(topics["bid"], key_serde=string, value_serde=json)
        .join(category_10, row, JoinWindows.of_time_difference_and_grace(JOIN_MS, GRACE_MS))
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    wanted = {a["id"]: a for a in auctions(events) if a["category"] == CATEGORY}
    return per_key(
        (str(bid["auction"]), row(bid, wanted[bid["auction"]]))
        for bid in bids(events)
        if bid["auction"] in wanted
    )
