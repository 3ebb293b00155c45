"""Nexmark q8, monitor new users: people who opened an auction in the 10 s window in which
they registered.

SQL::

    SELECT P.id, P.name, P.starttime
    FROM (SELECT id, name, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY id, name, window_start, window_end) P
    JOIN (SELECT seller, window_start AS starttime, window_end AS endtime
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(dateTime), INTERVAL '10' SECOND))
          GROUP BY seller, window_start, window_end) A
    ON P.id = A.seller AND P.starttime = A.starttime AND P.endtime = A.endtime

Mapping: people as a **versioned** ``KTable`` (keyed by person id), auctions re-keyed by seller
(a repartition) and joined with it: each auction looks its seller up as of the auction's time,
and the pair counts when both fall in the same 10 s tumbling window. Key: the person id (a
person registers once, so in one window); value ``{"id", "name", "starttime"}``. Every
qualifying auction writes the same row again.

What differs: an auction counts only if its seller registered at or before it (the lookup is as
of the auction's time); the SQL also pairs an auction with a seller who registers later in the
same window. The lookup as of the auction's time makes the result independent of the order in
which people and re-keyed auctions reach a task, where a table of latest values would not be.
"""

from __future__ import annotations

from typing import Any

from fluvial import Materialized, StreamsBuilder, serdes

SIZE_MS = 10_000
#: How far back the people table answers lookups: a person registers once, so the latest (only)
#: version is what every lookup finds; the history is for people re-registered with a new name.
HISTORY_MS = 60_000


def new_seller(auction: dict[str, Any], person: dict[str, Any]) -> dict[str, Any] | None:
    start = person["dateTime"] - person["dateTime"] % SIZE_MS
    if auction["dateTime"] - auction["dateTime"] % SIZE_MS != start:
        return None
    return {"id": person["id"], "name": person["name"], "starttime": start}


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    people = builder.table(
        topics["person"],
        key_serde=string,
        value_serde=json,
        materialized=Materialized().as_versioned(None, HISTORY_MS),
    )
    (
        builder.stream(topics["auction"], key_serde=string, value_serde=json)
        .select_key(lambda key, auction: str(auction["seller"]))
        .join(people, new_seller, key_serde=string, value_serde=json)
        .filter(lambda key, row: row is not None)
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    people = {e["id"]: e for e in events if "emailAddress" in e}
    result = {}
    for event in events:
        if "seller" not in event:
            continue
        person = people.get(event["seller"])
        if person is not None and person["dateTime"] <= event["dateTime"]:
            row = new_seller(event, person)
            if row is not None:
                result[str(person["id"])] = row
    return result
