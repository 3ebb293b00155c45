"""Co-partitioning is about bytes: a re-keyed stream joined with a table writes its keys as the
table does, two known key serdes that differ are refused, and raw-bytes sources are not guessed.
"""

from __future__ import annotations

import pytest

from fluvial import (
    Grouped,
    Joined,
    JoinWindows,
    Materialized,
    Repartitioned,
    StreamJoined,
    StreamsBuilder,
    serdes,
)
from fluvial.errors import TopologyError
from fluvial.topology.nodes import SinkNode, SourceNode


def repartition_key_serdes(topology) -> dict[str, str]:  # noqa: ANN001
    """Key serde name of every repartition topic, as its writer and its reader use it."""
    found: dict[str, str] = {}
    for node in topology.nodes.values():
        if isinstance(node, SinkNode) and node.topic.endswith("-repartition"):
            found[node.topic] = node.key_serde.name
    for node in topology.nodes.values():
        if isinstance(node, SourceNode):
            for topic in node.topics:
                if topic in found:
                    assert node.key_serde.name == found[topic], topic
    return found


def orders_by_user(b: StreamsBuilder, topic: str = "orders"):  # noqa: ANN201
    return b.stream(topic, key_serde=serdes.string(), value_serde=serdes.json()).select_key(
        lambda k, o: o["user_id"]
    )


def test_rekeyed_stream_joined_with_a_table_takes_the_tables_key_serde() -> None:
    b = StreamsBuilder()
    users = b.table("users", key_serde=serdes.string(), value_serde=serdes.string())
    orders_by_user(b).join(users, lambda o, country: country).to("joined")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}


def test_key_serde_given_to_a_stream_table_join_writes_the_repartition_topic() -> None:
    b = StreamsBuilder()
    users = b.table("users", value_serde=serdes.string())  # raw-bytes keys: nothing to infer
    orders_by_user(b).join(users, lambda o, c: c, key_serde=serdes.string()).to("joined")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}
    b = StreamsBuilder()
    users = b.table("users", value_serde=serdes.string())
    orders_by_user(b).join(users, lambda o, c: c, Joined.with_(serdes.string(), None)).to("j")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}


def test_two_known_key_serdes_that_differ_are_refused_naming_both() -> None:
    b = StreamsBuilder()
    users = b.table("users", key_serde=serdes.long(), value_serde=serdes.string())
    orders_by_user(b).join(users, lambda o, c: c, key_serde=serdes.string()).to("joined")
    with pytest.raises(TopologyError) as error:
        b.build()
    message = str(error.value)
    assert "key serde string" in message and "key serde long" in message
    assert "'users'" in message and "same key serde" in message


def test_a_rekeyed_stream_joined_with_raw_byte_keys_is_refused() -> None:
    b = StreamsBuilder()
    users = b.table("users", value_serde=serdes.string())
    orders_by_user(b).join(users, lambda o, c: c).to("joined")
    with pytest.raises(TopologyError, match="key_serde="):
        b.build()


def test_stream_stream_join_repartitions_take_the_known_sides_serde() -> None:
    b = StreamsBuilder()
    clicks = b.stream("clicks", key_serde=serdes.string(), value_serde=serdes.json())
    views = orders_by_user(b)
    window = JoinWindows.of_time_difference_and_grace(1000, 0)
    views.join(clicks, lambda a, c: 1, window).to("out")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}
    # Both re-keyed, StreamJoined's key serde writes both repartition topics.
    b = StreamsBuilder()
    left, right = orders_by_user(b), orders_by_user(b, "returns")
    left.join(right, lambda a, c: 1, window, joined=StreamJoined.with_(serdes.string(), None)).to(
        "out"
    )
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}


def test_grouped_table_joined_with_a_source_table_takes_its_key_serde() -> None:
    b = StreamsBuilder()
    users = b.table("users", key_serde=serdes.string(), value_serde=serdes.string())
    totals = (
        b.table("orders", key_serde=serdes.string(), value_serde=serdes.json())
        .group_by(lambda k, o: (o["user_id"], o["amount"]))
        .reduce(lambda a, v: a + v, lambda a, v: a - v)
    )
    totals.join(users, lambda total, country: f"{country}:{total}").to_stream().to("out")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}


def test_cogrouped_streams_share_a_key_serde() -> None:
    b = StreamsBuilder()
    a = orders_by_user(b).group_by_key()
    c = b.stream("refunds", key_serde=serdes.string(), value_serde=serdes.json()).group_by_key()
    a.cogroup(lambda k, v, agg: agg + 1).cogroup(c, lambda k, v, agg: agg - 1).aggregate(
        lambda: 0
    ).to_stream().to("out")
    assert set(repartition_key_serdes(b.build()).values()) == {"string"}


def test_unjoined_regrouping_keeps_its_own_serde() -> None:
    b = StreamsBuilder()
    orders_by_user(b).group_by_key(Grouped.with_(serdes.string(), serdes.json())).count()
    orders_by_user(
        b, "returns"
    ).group_by_key().count()  # unknown and joined with nothing: fluvial's JSON
    assert sorted(repartition_key_serdes(b.build()).values()) == ["json", "string"]


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        (Materialized.as_("x").with_(serdes.string(), serdes.long()), ("x", "string", "long")),
        (Materialized.with_(serdes.string(), serdes.long()).as_("x"), ("x", "string", "long")),
        (Grouped.as_("g").with_(serdes.string(), None), ("g", "string", None)),
        (Repartitioned.as_("r").with_key_serde(serdes.string()), ("r", "string", None)),
    ],
)
def test_chained_options_keep_every_setting(option, expected) -> None:  # noqa: ANN001
    name = getattr(option, "store_name", None) or option.name
    value = option.value_serde.name if option.value_serde else None
    assert (name, option.key_serde.name, value) == expected


def test_named_store_survives_with_serdes() -> None:
    b = StreamsBuilder()
    (
        b.stream("s", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count(materialized=Materialized.as_("counts-store").with_(serdes.string(), serdes.long()))
    )
    assert "counts-store" in b.build().stores


def test_repartitioned_options_chain() -> None:
    r = Repartitioned.as_("r").with_number_of_partitions(4).with_value_serde(serdes.json())
    assert (r.name, r.num_partitions, r.value_serde.name) == ("r", 4, "json")
