"""The Nexmark model: the three event kinds, their topics, and the generator's fixed numbers.

Events are plain dicts, exactly the JSON values on the topics (field names as in the Nexmark
specification, times in epoch milliseconds, prices in cents):

- person: ``id, name, emailAddress, creditCard, city, state, dateTime, extra``
- auction: ``id, itemName, description, initialBid, reserve, dateTime, expires, seller,
  category, extra``
- bid: ``auction, bidder, price, channel, url, dateTime, extra``

Keys are UTF-8 decimal strings: a person's id, an auction's id, and a bid's auction id, so
auctions and their bids are co-partitioned. Values are compact JSON with sorted keys, the bytes
of fluvial's ``serdes.json()``. A record's timestamp is its event's ``dateTime``.

This module is plain Python with no fluvial imports except the partitioner, so the queries'
plain-Python oracles can use it.
"""

from __future__ import annotations

from typing import Any

from fluvial.partitioner import default_partition

PERSON, AUCTION, BID = "person", "auction", "bid"
KINDS = (PERSON, AUCTION, BID)

# Ids start above zero so that small inputs still find matches (the specification's choice).
FIRST_PERSON_ID = 1000
FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID = 10
NUM_CATEGORIES = 5

# Of every 50 events: 1 person, 3 auctions, 46 bids.
PERSON_PROPORTION = 1
AUCTION_PROPORTION = 3
BID_PROPORTION = 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION

# Bids and new auctions pick their people and auctions among these recent ones, plus a few ids
# not created yet ("leads": a bid may name an auction created just after it).
NUM_ACTIVE_PEOPLE = 1000
NUM_IN_FLIGHT_AUCTIONS = 100
PERSON_ID_LEAD = 10
AUCTION_ID_LEAD = 10

# Hot auctions, bidders and sellers: one in HOT_*_RATIO draws picks at random; the others pick
# the hot one (the first auction or person of the latest batch of 100).
HOT_AUCTION_RATIO = 2
HOT_BIDDER_RATIO = 4
HOT_SELLER_RATIO = 4
HOT_BATCH = 100

# Average serialized sizes the ``extra`` field pads each event to (the specification's bytes).
AVG_PERSON_BYTES = 200
AVG_AUCTION_BYTES = 500
AVG_BID_BYTES = 100

# Bid channels: half of the bids come through one of the hot channels, the others through one
# of CHANNELS numbered ones (``channel-N``).
HOT_CHANNELS = ("Google", "Facebook", "Baidu", "Apple")
CHANNELS = 10_000

US_STATES = ("AZ", "CA", "ID", "OR", "WA", "WY")
US_CITIES = (
    "Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle",
    "Kent", "Cheyenne",
)  # fmt: skip
FIRST_NAMES = ("Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter")  # fmt: skip
LAST_NAMES = ("Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris")  # fmt: skip

#: Events per second of event time by default: one event per millisecond, so no two events
#: share a timestamp and the order of records in every task is fully determined.
DEFAULT_RATE = 1000

#: The longest an auction runs. The specification's lengths average the time in which
#: NUM_IN_FLIGHT_AUCTIONS new auctions appear (1,666 events: 1.7 s at the default rate) and
#: reach twice that; below 167 events/s they would pass this bound and are cut to it. The
#: winning-bid queries (q4, q6, q9) join a bid to its auction within this time.
MAX_AUCTION_MS = 20_000


def topics(prefix: str) -> dict[str, str]:
    """The three input topics of a run: ``{prefix}-person``, ``{prefix}-auction``, ``{prefix}-bid``."""
    return {kind: f"{prefix}-{kind}" for kind in KINDS}


def kind(event: dict[str, Any]) -> str:
    """``person``, ``auction`` or ``bid``: a bid is the only event with a ``bidder``, an auction
    the only one with a ``seller``."""
    if "bidder" in event:
        return BID
    return AUCTION if "seller" in event else PERSON


def key(event: dict[str, Any]) -> str:
    """The event's record key: the auction id of a bid, else the event's own id."""
    return str(event["auction"] if "bidder" in event else event["id"])


def partition(key_text: str, partitions: int) -> int:
    """The partition Kafka's Java partitioner (murmur2) gives a record key."""
    return default_partition(key_text.encode(), partitions)
