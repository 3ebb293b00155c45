"""Nexmark q13, bounded side input join: each bid enriched from a small table.

SQL (Flink's Nexmark)::

    SELECT B.auction, B.bidder, B.price, B.dateTime, S.value
    FROM (SELECT *, PROCTIME() AS p_time FROM bid) B
    JOIN side_input FOR SYSTEM_TIME AS OF B.p_time AS S
    ON mod(B.auction, 10000) = S.key

The side input: Nexmark's is 10,000 rows, each a number and its decimal text (``0 -> "0"``,
…). Here it is a topic, ``{prefix}-side-input`` (or ``topics["side_input"]``): key the
decimal text of ``k`` for ``k`` in ``[0, 10000)``, value the JSON string of the same text
(``"42"``), written before the query starts by :func:`fill_side_input`.

Mapping: the side input is a ``GlobalKTable`` (every task holds all of it, read to its end
before any bid is processed, as the SQL's lookup table is there before the first bid), and
the bid stream joins it by ``str(auction % 10000)`` (an inner join, so no repartition):

- key: the bid's key (its auction id, as the input);
- value ``{"auction", "bidder", "price", "dateTime", "value"}``.

What differs from the SQL: nothing in the rows. A side-input row written while the query runs
reaches each task when it next polls the global topic, as the SQL's lookup ``AS OF`` the
processing time does.

:func:`oracle` returns, per key, the list of rows in input order (one key's rows are
read from one partition, in order, so a run gives them in that order too).
"""

from __future__ import annotations

from typing import Any

from fluvial import StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, per_key

SIDE_INPUT_ROWS = 10_000


def side_input_topic(topics: dict[str, str]) -> str:
    """``topics["side_input"]``, else the bid topic's name with ``-side-input`` for ``-bid``."""
    if "side_input" in topics:
        return topics["side_input"]
    return topics["bid"].removesuffix("-bid") + "-side-input"


def side_input() -> list[tuple[str, str]]:
    """The side input's rows: (key, value), both the decimal text of ``0 … 9999``."""
    return [(str(k), str(k)) for k in range(SIDE_INPUT_ROWS)]


def fill_side_input(
    bootstrap_servers: str,
    topic: str,
    *,
    partitions: int = 1,
    client_config: dict[str, Any] | None = None,
) -> None:
    """Create ``topic`` and write :func:`side_input` to it (placed by Java's partitioner)."""
    from confluent_kafka import Producer

    from fluvial.kafka.admin import TopicSpec, create_topics

    create_topics(bootstrap_servers, [TopicSpec(topic, partitions)])
    value_serde = serdes.json()
    producer = Producer({
        **(client_config or {}),
        "bootstrap.servers": bootstrap_servers,
        "partitioner": "murmur2_random",
        "enable.idempotence": True,
    })  # fmt: skip
    for key, value in side_input():
        producer.produce(topic, key=key.encode(), value=value_serde.serialize(topic, value))
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not write the side input to {topic!r} in 60 s: is Kafka up?")


def _row(bid: dict[str, Any], value: str) -> dict[str, Any]:
    return {
        "auction": bid["auction"],
        "bidder": bid["bidder"],
        "price": bid["price"],
        "dateTime": bid["dateTime"],
        "value": value,
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    side = builder.global_table(
        side_input_topic(topics), key_serde=serdes.string(), value_serde=serdes.json()
    )
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        .join(side, _row, key_selector=lambda auction, bid: str(bid["auction"] % SIDE_INPUT_ROWS))
        .to(output, key_serde=serdes.string(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    table = dict(side_input())
    return per_key(
        (str(bid["auction"]), _row(bid, table[str(bid["auction"] % SIDE_INPUT_ROWS)]))
        for bid in bids(events)
    )
