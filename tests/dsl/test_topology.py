"""Topology structure: sub-topologies, generated and user names, internal topics, describe(),
and invalid topologies failing at build()."""

from __future__ import annotations

import pytest

from fluvial import (
    Grouped,
    KeyValue,
    Materialized,
    Named,
    StreamsBuilder,
    TimeWindows,
    serdes,
)
from fluvial.errors import TopologyError
from fluvial.processor import Stores

S = serdes.string()


def key_change_then_count(grouped: Grouped | None = None, materialized=None):
    builder = StreamsBuilder()
    (
        builder.stream("words", key_serde=S, value_serde=S)
        .map(lambda k, v: KeyValue(v, v))
        .group_by_key(grouped)
        .count(materialized=materialized)
        .to_stream()
        .to("counts")
    )
    return builder.build()


def test_key_change_and_grouping_make_two_subtopologies_joined_by_repartition_topic():
    topology = key_change_then_count()
    subs = topology.subtopologies("wordcount")
    assert len(subs) == 2
    repartition = "wordcount-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"
    assert subs[0].source_topics == ("words",)
    assert subs[0].sink_topics == (repartition,)
    assert subs[1].source_topics == (repartition,)
    assert subs[1].repartition_source_topics == (repartition,)
    assert subs[1].sink_topics == ("counts",)
    assert [s.name for s in subs[1].stores] == ["KSTREAM-AGGREGATE-STATE-STORE-0000000002"]
    text = str(topology.describe())
    assert "Sub-topology: 0" in text and "Sub-topology: 1" in text
    assert (
        "Sink: KSTREAM-SINK-0000000004 (topic: KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition)"
        in text
    )
    assert (
        "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])"
        in text
    )


def test_describe_matches_kafka_streams_layout():
    text = str(key_change_then_count().describe())
    assert text.splitlines()[:6] == [
        "Topologies:",
        "   Sub-topology: 0",
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [words])",
        "      --> KSTREAM-MAP-0000000001",
        "    Processor: KSTREAM-MAP-0000000001 (stores: [])",
        "      --> KSTREAM-FILTER-0000000005",
    ]
    as_dict = key_change_then_count().describe("app").to_dict()
    sinks = [n for s in as_dict["subtopologies"] for n in s["nodes"] if n["kind"] == "sink"]
    assert sinks[0]["topics"] == ["app-KSTREAM-AGGREGATE-STATE-STORE-0000000002-repartition"]


def test_user_names_for_grouping_store_and_processors():
    topology = key_change_then_count(Grouped.as_("by-word"), Materialized.as_("word-counts"))
    topics = {t.name: t for t in topology.internal_topics("app")}
    assert set(topics) == {"app-by-word-repartition", "app-word-counts-changelog"}
    assert topics["app-by-word-repartition"].configs == {
        "cleanup.policy": "delete",
        "retention.ms": "-1",
    }
    assert topics["app-by-word-repartition"].follows == ("words",)
    assert topics["app-word-counts-changelog"].configs == {"cleanup.policy": "compact"}
    assert "by-word-repartition-sink" in topology.nodes


def test_no_repartition_without_key_change():
    builder = StreamsBuilder()
    builder.stream("in", key_serde=S, value_serde=S).filter(
        lambda k, v: True
    ).group_by_key().count()
    topology = builder.build()
    assert topology.subtopology_count == 1
    assert [t.kind for t in topology.internal_topics("a")] == ["changelog"]


def test_window_store_changelog_is_compact_delete_with_retention_plus_one_day():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(60_000, 5_000))
        .count(materialized=Materialized.as_("w").with_retention(3_600_000))
    )
    (changelog,) = builder.build().internal_topics("app")
    assert changelog.name == "app-w-changelog"
    assert changelog.configs == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(3_600_000 + 86_400_000),
        # Retention counts from when a record was written, so backfilled (old) event times
        # do not expire the changelog at once.
        "message.timestamp.type": "LogAppendTime",
    }
    (longer,) = builder.build().internal_topics("app", additional_retention_ms=7 * 86_400_000)
    assert longer.configs["retention.ms"] == str(3_600_000 + 7 * 86_400_000)


def test_named_processors_and_table_source_names():
    builder = StreamsBuilder()
    builder.table("users", key_serde=S, value_serde=S).filter(
        lambda k, v: True, Named.as_("keep-all")
    ).to_stream().to("out")
    topology = builder.build()
    assert {
        "users-STATE-STORE-0000000000",
    } == set(topology.stores)
    assert "KSTREAM-SOURCE-0000000001" in topology.nodes
    assert "KTABLE-SOURCE-0000000002" in topology.nodes
    assert "keep-all" in topology.nodes


# -- invalid topologies -------------------------------------------------------------------


def test_empty_topology_names_the_missing_source():
    with pytest.raises(TopologyError, match="no source"):
        StreamsBuilder().build()


def test_topic_read_twice_is_rejected():
    builder = StreamsBuilder()
    builder.stream("in").to("a")
    builder.stream("in").to("b")
    with pytest.raises(TopologyError, match="'in' is read by two sources"):
        builder.build()


def test_duplicate_store_names_are_rejected():
    builder = StreamsBuilder()
    stream = builder.stream("in", key_serde=S, value_serde=S).group_by_key()
    stream.count(materialized=Materialized.as_("same"))
    stream.reduce(lambda a, b: a + b, materialized=Materialized.as_("same"))
    with pytest.raises(TopologyError, match="'same' is defined twice"):
        builder.build()


def test_duplicate_processor_names_are_rejected():
    builder = StreamsBuilder()
    stream = builder.stream("in")
    stream.filter(lambda k, v: True, Named.as_("f")).filter(lambda k, v: True, Named.as_("f"))
    with pytest.raises(TopologyError, match="two processors are named 'f'"):
        builder.build()


def test_processor_using_an_unregistered_store_is_rejected():
    builder = StreamsBuilder()
    builder.stream("in").process(lambda: None, "missing-store")
    with pytest.raises(TopologyError, match="'missing-store', which was never added"):
        builder.build()


def test_window_retention_shorter_than_size_plus_grace_is_rejected():
    builder = StreamsBuilder()
    (
        builder.stream("in", key_serde=S, value_serde=S)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(1000, 500))
        .count(materialized=Materialized.as_("w").with_retention(1200))
    )
    with pytest.raises(TopologyError, match="retention 1200 ms is shorter than window size"):
        builder.build()


def test_every_problem_is_reported_at_once():
    builder = StreamsBuilder()
    builder.add_state_store(Stores.key_value_store_builder("s", S, S))
    builder.add_state_store(Stores.key_value_store_builder("s", S, S))
    builder.stream("x").process(lambda: None, "nope")
    with pytest.raises(TopologyError) as error:
        builder.build()
    assert "'s' is defined twice" in str(error.value)
    assert "'nope'" in str(error.value)


def test_materialized_passed_as_a_name_is_a_clear_error():
    import pytest

    from fluvial import Materialized, StreamsBuilder

    grouped = StreamsBuilder().stream("in").group_by_key()
    with pytest.raises(TypeError, match="materialized=Materialized"):
        grouped.aggregate(dict, lambda k, v, agg: agg, Materialized.as_("store"))
