"""Nexmark q9, winning bids: each closed auction with its winning bid.

SQL::

    SELECT id, itemName, description, initialBid, reserve, dateTime, expires, seller, category,
           extra, auction, bidder, price, bid_dateTime, bid_extra
    FROM (SELECT A.*, B.auction, B.bidder, B.price, B.dateTime AS bid_dateTime,
                 B.extra AS bid_extra,
                 ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.dateTime ASC)
                   AS rownum
          FROM auction A, bid B
          WHERE A.id = B.auction AND B.dateTime BETWEEN A.dateTime AND A.expires)
    WHERE rownum <= 1

Mapping: the winning bid of each auction, emitted once when the auction closes (see
:mod:`~fluvial.bench.nexmark.queries._winning`), as the SQL's row. Key: the auction id; value
the 15 columns above.

What differs: the SQL revises each auction's row with every better bid; here an auction's row
is written once, when it closes. Ties beyond price and time go to the lower bidder id, then
the smaller ``extra``.
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._winning import closed_auctions, closed_winners

AUCTION_COLUMNS = ("id", "itemName", "description", "initialBid", "reserve", "dateTime",
                   "expires", "seller", "category", "extra")  # fmt: skip


def row(auction: dict[str, Any], bid: dict[str, Any]) -> dict[str, Any]:
    return {
        **{c: auction[c] for c in AUCTION_COLUMNS},
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "bid_dateTime": bid["dateTime"],
        "bid_extra": bid["extra"],
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    (
        closed_auctions(builder, topics, "q9", AUCTION_COLUMNS)
        .map_values(lambda pair: row(pair["auction"], pair["bid"]))
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]], partitions: int) -> dict[str, dict[str, Any]]:
    return {
        str(aid): row(auction, bid)
        for aid, (auction, bid) in closed_winners(events, partitions).items()
    }
