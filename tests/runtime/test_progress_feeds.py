"""The progress an upstream task advertises on a repartition topic, and the time a windowed
operator resumes from, count only the inputs that can reach them (docs/semantics.md, "Tables
and event time").

A table stamped with the wall clock while its stream carries event times 20 minutes old must
not say, on the stream's repartition topic, that the task has reached "now": downstream
windows would close before the stream's next records. Run on the test driver: the computation
is the one the runtime sends (runtime/progress.py, ``writer_progress``).
"""

from __future__ import annotations

from fluvial import JoinWindows, KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.processor.collector import ConsumedRecord
from fluvial.processor.metrics import DROPPED_RECORDS
from fluvial.processor.task import StreamTask
from fluvial.runtime.progress import writer_progress
from fluvial.testing import TopologyTestDriver

S, J = serdes.string(), serdes.json()
NOW = 1_800_000_000_000
OLD = NOW - 20 * 60_000


def upstream(driver: TopologyTestDriver) -> tuple[StreamTask, frozenset[str]]:
    """The task that writes the topology's one repartition topic, and that topic's feeds."""
    [(task, feeds)] = [
        (t, f) for t in driver.tasks for f in t.subtopology.repartition_feeds().values()
    ]
    return task, feeds


def stream_table_rekey() -> StreamsBuilder:
    builder = StreamsBuilder()
    sensors = builder.table("sensors", key_serde=S, value_serde=J)
    readings = builder.stream("readings", key_serde=S, value_serde=J)
    (readings.join(sensors, lambda r, s: {"site": s["site"], "v": r["v"]})
        .select_key(lambda k, v: v["site"])
        .group_by_key(key_serde=S, value_serde=J)
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=60_000, grace_ms=30_000))
        .count())  # fmt: skip
    return builder


def test_a_joined_table_never_counts_on_the_streams_repartition_topic() -> None:
    with TopologyTestDriver(stream_table_rekey().build()) as driver:
        driver.create_input_topic("sensors", S, J).pipe_input("s1", {"site": "a"}, timestamp_ms=NOW)
        readings = driver.create_input_topic("readings", S, J)
        readings.pipe_input("s1", {"v": 1}, timestamp_ms=OLD)
        readings.pipe_input("s1", {"v": 2}, timestamp_ms=OLD + 5_000)
        readings.pipe_input("s1", {"v": 3}, timestamp_ms=OLD + 1_000)  # out of order
        task, feeds = upstream(driver)
        assert feeds == {"readings"}
        assert task.stream_time == NOW  # the task's own stream time includes the table's
        assert writer_progress(task, feeds, {}) == (OLD + 5_000, False, ())
        # Having read all of its stream, it says so, and where it read to, whatever the table
        # still holds.
        assert writer_progress(task, feeds, {("readings", 0): 3}) == (
            OLD + 5_000,
            True,
            (("readings", 0, 3),),
        )
        assert writer_progress(task, feeds, {("sensors", 0): 1}) == (OLD + 5_000, False, ())


def test_a_table_with_nothing_from_the_stream_yet_says_no_time() -> None:
    with TopologyTestDriver(stream_table_rekey().build()) as driver:
        driver.create_input_topic("sensors", S, J).pipe_input("s1", {"site": "a"}, timestamp_ms=NOW)
        task, feeds = upstream(driver)
        assert writer_progress(task, feeds, {}) == (-1, False, ())


def test_a_table_that_feeds_the_repartition_topic_counts() -> None:
    builder = StreamsBuilder()
    (builder.table("sensors", key_serde=S, value_serde=J)
        .group_by(lambda k, v: KeyValue(v["site"], v), key_serde=S, value_serde=J)
        .count())  # fmt: skip
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("sensors", S, J).pipe_input("s1", {"site": "a"}, timestamp_ms=NOW)
        task, feeds = upstream(driver)
        assert feeds == {"sensors"}
        assert writer_progress(task, feeds, {}) == (NOW, False, ())


def test_both_sides_of_a_stream_stream_join_count() -> None:
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=S, value_serde=J)
    right = builder.stream("right", key_serde=S, value_serde=J)
    (left.join(right, lambda a, b: {"k": a["k"]},
               JoinWindows.of_time_difference_and_grace(1_000, 0))
        .select_key(lambda k, v: v["k"])
        .group_by_key(key_serde=S, value_serde=J)
        .count())  # fmt: skip
    with TopologyTestDriver(builder.build()) as driver:
        driver.create_input_topic("left", S, J).pipe_input("x", {"k": "a"}, timestamp_ms=OLD)
        driver.create_input_topic("right", S, J).pipe_input("x", {"k": "a"}, timestamp_ms=NOW)
        task, feeds = upstream(driver)
        assert feeds == {"left", "right"}
        assert writer_progress(task, feeds, {}) == (NOW, False, ())


class _Collected:
    """A collector that keeps what the task sends."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, *args: object) -> None:
        self.sent.append(args)


def resumed_join_then_window(*, resume_inputs: bool) -> tuple[StreamTask, _Collected]:
    """A stream-table join and a windowed count in one task, resumed from a commit made when
    the table had reached NOW and the readings OLD."""
    builder = StreamsBuilder()
    sensors = builder.table("sensors", key_serde=S, value_serde=J)
    (builder.stream("readings", key_serde=S, value_serde=J)
        .join(sensors, lambda r, s: r)
        .group_by_key(key_serde=S, value_serde=J)
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=60_000, grace_ms=30_000))
        .count()
        .to_stream()
        .to("counts", key_serde=serdes.time_windowed(S, 60_000), value_serde=serdes.long()))  # fmt: skip
    [sub] = builder.build().subtopologies("app")
    collected = _Collected()
    task = StreamTask(
        (0, 0), sub, StreamsConfig(application_id="app", cache_max_bytes=0), None, collected
    )
    resumed = {"readings": OLD, "sensors": NOW}
    task.resume_stream_time(NOW, tuple(resumed[t] for t in sub.source_topics) if resume_inputs
                            else ())  # fmt: skip
    task.initialize()
    task.add_records("sensors", 0, [ConsumedRecord(b"s1", b'{"site": "a"}', NOW - 1, 0)])
    task.process_batch(10)
    task.add_records("readings", 0, [ConsumedRecord(b"s1", b'{"v": 1}', OLD + 1_000, 0)])
    task.process_batch(10)
    return task, collected


def test_a_windowed_count_beside_a_joined_table_resumes_from_its_streams_time() -> None:
    """After a restart, the count starts from the readings' time, not the table's: a reading
    just after the commit is in its window, not dropped as 20 minutes late."""
    task, collected = resumed_join_then_window(resume_inputs=True)
    newest = dict(zip(task.subtopology.source_topics, task.input_times(), strict=True))
    assert newest == {"readings": OLD + 1_000, "sensors": NOW}
    assert task.metrics.get(DROPPED_RECORDS) == 0
    assert [args[0] for args in collected.sent if args[0] == "counts"] == ["counts"]


def test_a_commit_without_input_times_resumes_from_the_tasks_stream_time() -> None:
    """Commits of an earlier fluvial say only the task's stream time: the count starts there."""
    task, _collected = resumed_join_then_window(resume_inputs=False)
    assert task.metrics.get(DROPPED_RECORDS) == 1
