"""Nexmark q3, local item suggestion: sellers in Oregon, Idaho or California with an auction in
category 10.

SQL::

    SELECT P.name, P.city, P.state, A.id
    FROM auction AS A INNER JOIN person AS P ON A.seller = P.id
    WHERE A.category = 10 AND (P.state = 'OR' OR P.state = 'ID' OR P.state = 'CA')

Mapping: the SQL's join is incremental (a row appears when both sides have arrived, whichever
came first), which Kafka Streams expresses as a join of two tables: auctions and people, each
read as a ``KTable`` and filtered, joined by a **foreign-key join** on ``seller`` (the auction
table is keyed by auction id, the people table by person id, so neither is re-keyed). The
output is the join's table as a stream: key the auction id, value ``{"city", "id", "name",
"state"}`` (``id`` the auction's).

What differs: an auction whose seller does not qualify (yet) may be written as a delete (a null
value) by the foreign-key join; the final value per key is the SQL's row or nothing.
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes

CATEGORY = 10
STATES = frozenset({"OR", "ID", "CA"})


def suggestion(auction: dict[str, Any], person: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": person["name"],
        "city": person["city"],
        "state": person["state"],
        "id": auction["id"],
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    string, json = serdes.string(), serdes.json()
    auctions = builder.table(topics["auction"], key_serde=string, value_serde=json).filter(
        lambda key, auction: auction["category"] == CATEGORY
    )
    people = builder.table(topics["person"], key_serde=string, value_serde=json).filter(
        lambda key, person: person["state"] in STATES
    )
    (
        auctions.join(
            people, suggestion, foreign_key_extractor=lambda auction: str(auction["seller"])
        )
        .to_stream()
        .to(output, key_serde=string, value_serde=json)
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    people = {e["id"]: e for e in events if "emailAddress" in e and e["state"] in STATES}
    result = {}
    for event in events:
        if "seller" in event and event["category"] == CATEGORY:
            person = people.get(event["seller"])
            if person is not None:
                result[str(event["id"])] = {
                    "name": person["name"], "city": person["city"], "state": person["state"],
                    "id": event["id"],
                }  # fmt: skip
    return result
