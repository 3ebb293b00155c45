"""Event time from the payload: timestamp extractors per source and by default, in the test driver.

The driver runs the runtime's StreamTask, so what holds here holds on both engines.
"""

from __future__ import annotations

import pytest

from fluvial import Consumed, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import ConfigError, SerializationError, TopologyError
from fluvial.testing import TopologyTestDriver

S, J, L = serdes.string(), serdes.json(), serdes.long()


def event_time(record, partition_time_ms):
    return record.value["ts"]


def windowed_counts(**source_options):
    builder = StreamsBuilder()
    (
        builder.stream("events", key_serde=S, value_serde=J, **source_options)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=1000, grace_ms=5000))
        .count()
        .to_stream()
        .map(lambda wk, n: (f"{wk.key}@{wk.window.start_ms}", n))
        .to("counts", key_serde=S, value_serde=L)
    )
    return builder.build()


def test_event_time_comes_from_the_payload_and_orders_windows():
    seen = []

    def extractor(record, partition_time_ms):
        seen.append((record.key, record.timestamp_ms, record.topic, record.offset,
                     partition_time_ms))  # fmt: skip
        return record.value["ts"]

    with TopologyTestDriver(windowed_counts(timestamp_extractor=extractor)) as driver:
        inp = driver.create_input_topic("events", S, J)
        out = driver.create_output_topic("counts", S, L)
        # Kafka timestamps say nothing; the payload's "ts" puts them in windows 0 and 5000.
        inp.pipe_input("a", {"ts": 5200}, timestamp_ms=1)
        inp.pipe_input("a", {"ts": 300}, timestamp_ms=2)
        inp.pipe_input("a", {"ts": 5900}, timestamp_ms=3)
        records = out.read_records()
    assert [(r.key, r.value, r.timestamp_ms) for r in records] == [
        ("a@5000", 1, 5200),
        ("a@0", 1, 300),
        ("a@5000", 2, 5900),
    ]
    # The record as consumed (Kafka timestamp, position) and the partition's time so far.
    assert seen == [("a", 1, "events", 0, -1), ("a", 2, "events", 1, 5200),
                    ("a", 3, "events", 2, 5200)]  # fmt: skip


def test_default_extractor_applies_to_user_topics_and_a_source_overrides_it():
    builder = StreamsBuilder()
    # The mapped values are ints: the default extractor must not read the repartition topic.
    (
        builder.stream("events", key_serde=S, value_serde=J)
        .map(lambda k, v: (v["user"], v["n"]))
        .group_by_key(key_serde=S, value_serde=L)
        .reduce(lambda a, b: a + b)
        .to_stream()
        .to("sums", key_serde=S, value_serde=L)
    )
    builder.stream(
        "other", key_serde=S, value_serde=J, timestamp_extractor=lambda r, _: r.value["at"]
    ).to("copied", key_serde=S, value_serde=J)
    config = StreamsConfig(application_id="tsx", default_timestamp_extractor=event_time)
    with TopologyTestDriver(builder.build(), config) as driver:
        driver.create_input_topic("events", S, J).pipe_input(
            "k", {"user": "u", "n": 2, "ts": 7000}, timestamp_ms=1
        )
        driver.create_input_topic("other", S, J).pipe_input("k", {"at": 42}, timestamp_ms=1)
        [summed] = driver.create_output_topic("sums", S, L).read_records()
        [copied] = driver.create_output_topic("copied", S, J).read_records()
    assert (summed.key, summed.value, summed.timestamp_ms) == ("u", 2, 7000)
    assert copied.timestamp_ms == 42


def test_table_and_consumed_take_an_extractor():
    builder = StreamsBuilder()
    builder.table(
        "users", Consumed.with_(S, J).with_timestamp_extractor(event_time)
    ).to_stream().to("out", key_serde=S, value_serde=J)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("users", S, J).pipe_input("u", {"ts": 123}, timestamp_ms=9)
        [row] = driver.create_output_topic("out", S, J).read_records()
    assert row.timestamp_ms == 123


@pytest.mark.parametrize(
    ("extractor", "problem"),
    [
        (lambda r, _: -1, "returned -1"),
        (lambda r, _: r.value["missing"], "raised KeyError"),
        (lambda r, _: "soon", "returned 'soon'"),
    ],
)
def test_a_bad_extraction_fails_under_the_default_handler(extractor, problem):
    with TopologyTestDriver(windowed_counts(timestamp_extractor=extractor)) as driver:
        inp = driver.create_input_topic("events", S, J)
        with pytest.raises(SerializationError, match=f"no event time for events-0@0.*{problem}"):
            inp.pipe_input("a", {"ts": 1}, timestamp_ms=1)


def test_a_bad_extraction_is_skipped_to_the_dead_letter_topic_under_log_and_continue():
    config = StreamsConfig(
        application_id="tsx",
        default_deserialization_exception_handler="log_and_continue",
        dead_letter_topic="dead",
    )
    with TopologyTestDriver(windowed_counts(timestamp_extractor=event_time), config) as driver:
        inp = driver.create_input_topic("events", S, J)
        inp.pipe_input("a", {"ts": 100}, timestamp_ms=1)
        inp.pipe_input("a", {"no-ts": True}, timestamp_ms=2)
        inp.pipe_input("a", {"ts": 200}, timestamp_ms=3)
        assert driver.create_output_topic("counts", S, L).read_key_values() == [
            ("a@0", 1),
            ("a@0", 2),
        ]
        [dead] = driver.create_output_topic("dead", S, J).read_records()
        metrics = driver.metrics()
    assert (dead.key, dead.value) == ("a", {"no-ts": True})
    headers = dict(dead.headers)
    assert b"timestamp extractor raised KeyError" in headers["fluvial.error"]
    assert headers["fluvial.source"] == b"events-0@1"
    assert metrics["deserialization-errors"] == 1


def test_bad_settings_are_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="default_timestamp_extractor must be a function"):
        StreamsConfig(default_timestamp_extractor=5)
    builder = StreamsBuilder()
    builder.stream("a", auto_offset_reset="newest").to("b")
    with pytest.raises(TopologyError, match="auto_offset_reset must be one of earliest, latest"):
        builder.build()


def test_a_global_table_takes_its_consumed_extractor():
    builder = StreamsBuilder()
    users = builder.global_table(
        "users", Consumed.with_(S, J).with_timestamp_extractor(event_time),
        materialized=Materialized.as_("users-store"),
    )  # fmt: skip
    builder.stream("clicks", key_serde=S, value_serde=S).join(
        users, lambda click, user: user["ts"], key_selector=lambda k, v: v
    ).to("joined", key_serde=S, value_serde=L)
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("users", S, J).pipe_input("u", {"ts": 123}, timestamp_ms=9)
        assert driver.get_key_value_store("users-store").get_with_timestamp("u").timestamp_ms == 123
    with pytest.raises(ValueError, match="GlobalKTable always reads its topic from the earliest"):
        StreamsBuilder().global_table("t", Consumed.with_(S, S).with_offset_reset_policy("latest"))
