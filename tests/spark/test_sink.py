"""The exactly-once Structured Streaming sink, one batch at a time, on the session's Spark.

Each test calls the ``foreachBatch`` function the way Spark does (a batch DataFrame and its
batch id) and reads the output topic back read_committed, record by record.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from tests import processes
from tests.event_times import event_time_base_ms
from tests.runtime.harness import wait_until
from tests.spark.sink_harness import read_all, values

from fluvial.errors import ConfigError
from fluvial.spark import BatchMarker, KafkaSink, SinkError
from fluvial.spark.markers import _watermarks
from fluvial.spark.sink import _write_partition, plan_batch

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def chunks(rows: list[str], partitions: int) -> list[list[str]]:
    """Split unevenly (sizes 1 : 2 : 3 …), so a mix-up between partitions changes counts."""
    weights = list(range(1, partitions + 1))
    bounds = [len(rows) * sum(weights[:i]) // sum(weights) for i in range(partitions + 1)]
    return [rows[bounds[i] : bounds[i + 1]] for i in range(partitions)]


def frame(spark, rows: list[str], partitions: int):  # noqa: ANN001, ANN201
    """A batch DataFrame of (key, value) strings split into exactly ``partitions``, unevenly."""
    parts = chunks(rows, partitions)
    rdd = spark.sparkContext.parallelize(range(partitions), partitions).flatMap(
        lambda i: [(r.split("-")[0], r) for r in parts[i]]
    )
    return spark.createDataFrame(rdd, "key string, value string")


def high_watermark(bootstrap: str, topic: str) -> int:
    """The high watermark: records written, committed or not (a read_committed client would
    be told the last stable offset instead)."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "hw", "isolation.level": "read_uncommitted"}
    )
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        consumer.close()


def test_batch_is_written_once_and_its_replay_is_skipped(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out", partitions=2)
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))
    first = [f"a{i % 7}-{i}" for i in range(300)]
    result = sink(frame(spark, first, 3), 0)
    assert (result.records_written, result.partitions_skipped) == (300, ())
    assert sorted(values(bootstrap_servers, out)) == sorted(first)

    replay = sink(frame(spark, first, 3), 0)  # Spark re-runs batch 0 after a restart
    assert (replay.records_written, replay.partitions_skipped) == (0, (0, 1, 2))
    second = [f"b{i % 5}-{i}" for i in range(120)]
    assert sink(frame(spark, second, 3), 1).records_written == 120

    records = read_all(bootstrap_servers, out)
    assert Counter(m.value().decode() for m in records) == Counter(first + second)
    # Keys go where Java's partitioner puts them: one key, one partition.
    partitions_of = {}
    for m in records:
        partitions_of.setdefault(m.key(), set()).add(m.partition())
    assert all(len(p) == 1 for p in partitions_of.values())
    sizes = [len(part) for part in chunks(second, 3)]
    assert sizes == [20, 40, 60]
    assert sink.markers() == {p: BatchMarker(1, 3, sizes[p]) for p in range(3)}


def write_directly(
    sink: KafkaSink, batch_id: int, partitions: int, index: int, rows, expected=None
):  # noqa: ANN001, ANN201
    """Run one partition's writer the way a Spark task does, here in the test process."""
    normalized = [
        (r.split("-")[0].encode(), r.encode(), sink.topic, None, None, None) for r in rows
    ]
    count = len(rows) if expected is None else expected
    return list(_write_partition(sink._spec, batch_id, partitions, index, iter(normalized), count))


def test_partly_written_batch_finishes_on_replay_and_refuses_a_new_split(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out")
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))
    rows = [f"k{i % 3}-{i}" for i in range(90)]
    split = chunks(rows, 3)  # as frame(spark, rows, 3) splits them: 15, 30 and 45 rows
    sink._ensure_marker_topic(3)
    # The driver died after partitions 0 and 1 of batch 7 committed, before partition 2 did.
    assert write_directly(sink, 7, 3, 0, split[0]) == [(0, False, 15)]
    assert write_directly(sink, 7, 3, 1, split[1]) == [(1, False, 30)]
    assert sorted(values(bootstrap_servers, out)) == sorted(split[0] + split[1])

    with pytest.raises(SinkError, match="partly written .* splits it into 4 partitions"):
        sink(frame(spark, rows, 4), 7)
    result = sink(frame(spark, rows, 3), 7)
    assert (result.records_written, result.partitions_skipped) == (45, (0, 1))
    assert Counter(values(bootstrap_servers, out)) == Counter(rows)


def test_writer_whose_input_is_cut_short_commits_nothing(
    bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out")
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))
    sink._ensure_marker_topic(1)
    with pytest.raises(SinkError, match="ended after 3 of its 5 records"):
        write_directly(sink, 0, 1, 0, ["a-1", "a-2", "a-3"], expected=5)
    assert values(bootstrap_servers, out) == []
    assert sink.markers() == {}


def test_batch_whose_computation_fails_writes_nothing(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out")
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))

    def poison(index, part):  # noqa: ANN001, ANN202
        for i, row in enumerate(part):
            if index == 2 and i == 10:
                raise RuntimeError("executor lost")
            yield row

    failing = spark.createDataFrame(
        spark.sparkContext.parallelize(
            [(f"k{i}", f"v{i}") for i in range(90)], 3
        ).mapPartitionsWithIndex(poison),
        "key string, value string",
    )
    with pytest.raises(Exception, match="executor lost"):
        sink(failing, 0)
    assert values(bootstrap_servers, out, committed_only=False) == []
    assert sink.markers() == {}


def test_zombie_writer_is_fenced_by_the_next_attempt(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out")
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))
    sink._ensure_marker_topic(1)
    rows = [f"z{i % 4}-{i}" for i in range(100)]
    # The zombie writes 10 of its rows and then waits for the test, its transaction open.
    zombie = processes.spawn(
        [sys.executable, "-m", "tests.spark.slow_writer", bootstrap_servers, out, sink.sink_id,
         "3", "100", "0.05", "10"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        what="the zombie sink writer",
    )  # fmt: skip
    # Stop it mid-transaction: some of its records are in the log, none committed.
    wait_until(lambda: high_watermark(bootstrap_servers, out) >= 10, 120,
               "the zombie to write part of its batch", interval_s=0.05)  # fmt: skip
    zombie.send_signal(signal.SIGSTOP)
    assert values(bootstrap_servers, out) == []
    result = sink(frame(spark, rows, 1), 3)  # the next attempt of the same batch partition
    assert (result.records_written, result.partitions_skipped) == (100, ())
    zombie.send_signal(signal.SIGCONT)
    _, stderr = zombie.communicate("go on\n", timeout=300)  # it writes the rest, then commits
    assert zombie.returncode != 0
    assert "fenced" in stderr.lower() or "epoch" in stderr.lower(), stderr[-2000:]
    assert Counter(values(bootstrap_servers, out)) == Counter(rows)
    assert len(read_all(bootstrap_servers, out, committed_only=False)) > len(rows)
    assert sink.markers() == {0: BatchMarker(3, 1, 100)}


def test_transaction_longer_than_its_timeout_is_aborted_with_a_clear_error(
    bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out")
    sink_id = unique_name("sink")
    short = KafkaSink(
        out, bootstrap_servers=bootstrap_servers, sink_id=sink_id, transaction_timeout_ms=1500
    )
    short._ensure_marker_topic(1)
    rows = [f"t{i % 4}-{i}" for i in range(30)]

    def stalled():  # noqa: ANN202 - a writer that stalls inside its transaction, past its timeout
        for i, row in enumerate(rows):
            if i == 10:
                # The broker aborts the overdue transaction by itself: an abort marker follows
                # the first ten records in the log. Only then does the writer go on.
                wait_until(lambda: high_watermark(bootstrap_servers, out) > 10, 120,
                           "the broker to abort the overdue transaction", interval_s=0.1)  # fmt: skip
            yield row.split("-")[0].encode(), row.encode(), out, None, None, None

    with pytest.raises(SinkError, match="past transaction_timeout_ms=1500"):
        list(_write_partition(short._spec, 0, 1, 0, stalled(), len(rows)))
    assert values(bootstrap_servers, out) == []
    assert short.markers() == {}

    def slowly():  # noqa: ANN202 - about 4.5 s, well within the default timeout
        for row in rows:
            time.sleep(0.15)
            yield row.split("-")[0].encode(), row.encode(), out, None, None, None

    patient = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=sink_id)
    assert list(_write_partition(patient._spec, 0, 1, 0, slowly(), len(rows))) == [(0, False, 30)]
    assert Counter(values(bootstrap_servers, out)) == Counter(rows)


def test_columns_of_spark_kafka_sink_including_headers_partition_and_timestamp(
    spark, bootstrap_servers, topic_factory, unique_name
) -> None:
    out = topic_factory("out", partitions=3)
    other = topic_factory("other")
    sink = KafkaSink(out, bootstrap_servers=bootstrap_servers, sink_id=unique_name("sink"))
    first_ts, second_ts = event_time_base_ms() + 123, event_time_base_ms() + 456
    batch = spark.createDataFrame(
        [
            (b"k1", "v1", None, 2, [("h", b"x")], first_ts),
            (None, "v2", other, None, None, second_ts),
        ],
        "key binary, value string, topic string, partition int, "
        "headers array<struct<key:string,value:binary>>, timestamp long",
    )
    sink(batch, 0)
    [first] = read_all(bootstrap_servers, out)
    assert (first.key(), first.value(), first.partition()) == (b"k1", b"v1", 2)
    assert first.headers() == [("h", b"x")]
    assert first.timestamp()[1] == first_ts
    [second] = read_all(bootstrap_servers, other)
    assert (second.key(), second.value(), second.timestamp()[1]) == (None, b"v2", second_ts)


def test_bad_columns_config_and_missing_topic_are_refused_before_writing(
    spark, bootstrap_servers, unique_name, topic_factory
) -> None:
    with pytest.raises(ConfigError, match="sink_id"):
        KafkaSink("out", bootstrap_servers=bootstrap_servers, sink_id="no spaces")
    with pytest.raises(ConfigError, match="transaction_timeout_ms"):
        KafkaSink("out", bootstrap_servers=bootstrap_servers, sink_id="s", transaction_timeout_ms=0)
    # A missing output topic is refused when the sink is made, before any query starts, with
    # the command that creates it.
    missing = unique_name("missing")
    with pytest.raises(ConfigError, match=f"output topic '{missing}' does not exist") as refused:
        KafkaSink(missing, bootstrap_servers=bootstrap_servers, sink_id="s")
    assert f"fluvial topics create {missing} --partitions N" in str(refused.value)
    sink = KafkaSink(topic_factory("out"), bootstrap_servers=bootstrap_servers, sink_id="s")
    with pytest.raises(ConfigError, match="'value' column"):
        sink.validate(spark.createDataFrame([("a",)], "key string"))
    with pytest.raises(ConfigError, match="column 'value' has type int"):
        sink.validate(spark.createDataFrame([(1,)], "value int"))
    with pytest.raises(ConfigError, match=r"does not know column\(s\) \['Key'\]"):
        sink.validate(spark.createDataFrame([("a", "b")], "Key string, value string"))


@pytest.mark.parametrize(
    ("markers", "batch", "partitions", "expected"),
    [
        ({}, 0, 2, "write"),
        ({0: BatchMarker(4, 2, 9), 1: BatchMarker(4, 2, 3)}, 5, 2, "write"),
        ({0: BatchMarker(5, 2, 9), 1: BatchMarker(5, 2, 3)}, 5, 2, "skip"),
        ({0: BatchMarker(5, 2, 9), 1: BatchMarker(5, 2, 3)}, 5, 8, "skip"),  # all done: any split
        ({0: BatchMarker(5, 2, 9), 1: BatchMarker(4, 2, 3)}, 5, 2, "write"),  # 1 still to do
        ({0: BatchMarker(5, 2, 9), 1: BatchMarker(4, 2, 3)}, 5, 3, "partly written"),
        ({0: BatchMarker(9, 2, 9)}, 5, 2, "already committed batch 9"),
        ({0: BatchMarker(5, 2, 9), 1: BatchMarker(5, 3, 1)}, 5, 2, "disagree"),
    ],
)
def test_plan_batch_decides_from_the_markers(markers, batch, partitions, expected) -> None:  # noqa: ANN001
    if expected in ("write", "skip"):
        assert plan_batch("s", markers, batch, partitions) == expected
    else:
        with pytest.raises(SinkError, match=expected):
            plan_batch("s", markers, batch, partitions)


def test_sink_settings_never_show_secrets(bootstrap_servers) -> None:
    sink = KafkaSink(
        None,
        bootstrap_servers=bootstrap_servers,
        sink_id="secretive",
        client_config={"sasl.password": "hunter2"},
    )
    assert "hunter2" not in repr(sink._spec)


class _LeaderMoving:
    """A consumer whose partition has no leader for its first answers, as right after the
    marker topic is created or while its leader moves (seen on a loaded machine)."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals

    def get_watermark_offsets(self, tp, timeout, cached):  # noqa: ANN001, ANN201
        if self.refusals:
            self.refusals -= 1
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return 0, 7

    def list_topics(self, topic, timeout):  # noqa: ANN001, ANN201
        return None


def test_marker_watermarks_wait_for_a_partition_leader() -> None:
    assert _watermarks(_LeaderMoving(3), TopicPartition("m", 0)) == (0, 7)  # type: ignore[arg-type]
