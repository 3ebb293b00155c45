"""StreamTask, driven directly as a runtime would: raw records in, bytes to a collector out."""

from __future__ import annotations

import struct

import pytest

from fluvial import StreamsBuilder, StreamsConfig, serdes
from fluvial.errors import SerializationError, StreamsError
from fluvial.processor import ConsumedRecord, StreamTask
from fluvial.state import ChangelogRecord

S = serdes.string()


class Collector:
    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, topic, key, value, timestamp_ms, headers, partition) -> None:
        self.sent.append((topic, key, value, timestamp_ms, partition))

    def to(self, topic: str) -> list[tuple]:
        return [s for s in self.sent if s[0] == topic]


def merged_count_task(
    config: StreamsConfig | None = None, store_type: str = "in_memory", state_dir=None
):
    builder = StreamsBuilder()
    left = builder.stream("left", key_serde=S, value_serde=S)
    right = builder.stream("right", key_serde=S, value_serde=S)
    merged = left.merge(right)
    merged.to("seen")
    merged.group_by_key().count().to_stream().to("counts")
    config = config or StreamsConfig(application_id="app", cache_max_bytes=0)
    (sub,) = builder.build().subtopologies(config.application_id)
    collector = Collector()
    task = StreamTask((0, 3), sub, config, state_dir, collector, default_store_type=store_type)
    return task, collector


def raw(key: str, ts: int, offset: int, value: str = "v") -> ConsumedRecord:
    return ConsumedRecord(key.encode(), value.encode(), ts, offset)


def drain(task: StreamTask, now: int = 0) -> int:
    n = 0
    while task.process_one(now):
        n += 1
    return n


def test_record_choice_takes_smallest_head_timestamp_across_partitions():
    task, collector = merged_count_task()
    task.add_records("left", 3, [raw("l1", 10, 0), raw("l2", 30, 1), raw("l3", 5, 2)])
    task.add_records("right", 3, [raw("r1", 20, 7), raw("r2", 25, 8)])
    drain(task)
    # Heads are compared, never whole partitions re-sorted: l3 (ts 5) waits behind l2.
    assert [s[1] for s in collector.to("seen")] == [b"l1", b"r1", b"r2", b"l2", b"l3"]
    assert task.stream_time == 30, "stream time is the max seen and never goes back"
    assert task.committable_offsets() == {("left", 3): 3, ("right", 3): 9}


def test_changelog_records_go_to_the_task_partition_of_the_changelog_topic():
    task, collector = merged_count_task()
    task.add_records("left", 3, [raw("k", 10, 0), raw("k", 11, 1)])
    drain(task)
    changelog = "app-KSTREAM-AGGREGATE-STATE-STORE-0000000004-changelog"
    assert collector.to(changelog) == [
        (changelog, b"k", struct.pack(">q", 1), 10, 3),
        (changelog, b"k", struct.pack(">q", 2), 11, 3),
    ]
    assert task.changelog_partitions() == {
        "KSTREAM-AGGREGATE-STATE-STORE-0000000004": (changelog, 3)
    }
    assert [s[4] for s in collector.to("counts")] == [None, None], "outputs use the partitioner"
    assert task.metrics.get("records-processed") == 2
    assert task.metrics.get("changelog-records") == 2


def test_restore_rebuilds_state_before_processing(store_type, tmp_path):
    task, collector = merged_count_task(store_type=store_type, state_dir=tmp_path)
    task.open_stores()
    task.restore(
        "KSTREAM-AGGREGATE-STATE-STORE-0000000004",
        [ChangelogRecord(b"k", struct.pack(">q", 41), 5)],
    )
    task.add_records("left", 3, [raw("k", 10, 0)])
    drain(task)
    assert collector.to("counts")[-1][2] == struct.pack(">q", 42)
    with pytest.raises(StreamsError, match="before initialize"):
        task.restore("KSTREAM-AGGREGATE-STATE-STORE-0000000004", [])
    task.close()


def test_max_task_idle_waits_for_an_empty_partition_then_proceeds():
    config = StreamsConfig(application_id="app", cache_max_bytes=0, max_task_idle_ms=100)
    task, collector = merged_count_task(config)
    task.add_records("left", 3, [raw("l1", 50, 0)])
    assert not task.process_one(1_000), "right is empty: its next record could be older"
    assert not task.process_one(1_099)
    assert task.process_one(1_100), "waited max_task_idle_ms: go"
    task.add_records("left", 3, [raw("l2", 60, 1)])
    task.add_records("right", 3, [raw("r1", 40, 0)])
    assert task.process_one(1_100)
    assert collector.to("seen")[-1][1] == b"r1"


def test_a_partition_still_to_be_fetched_holds_the_task_until_its_end_is_known():
    # A worker whose consumer reports partition ends: with max_task_idle_ms 0, as in Kafka
    # Streams, an empty partition is waited for until the consumer says it is at its end.
    task, collector = merged_count_task()
    task.wait_for_unfetched = True
    task.add_records("left", 3, [raw("l1", 50, 0)])
    assert drain(task) == 0, "right-3 may still hold older records"
    task.add_records("right", 3, [raw("r1", 20, 0)])
    assert drain(task) == 1 and task.stream_time == 20, "the older record goes first"
    assert drain(task) == 0, "right-3 is empty again, its end unknown"
    task.reached_end("right", 3)
    assert drain(task) == 1 and task.stream_time == 50
    task.add_records("right", 3, [raw("r2", 60, 1)])
    task.add_records("left", 3, [raw("l2", 70, 1)])
    assert drain(task) == 1, "new records: its end is unknown again"
    assert [s[1] for s in collector.to("seen")] == [b"r1", b"l1", b"r2"]


def test_a_partition_the_task_waits_for_never_counts_another_partitions_backlog():
    # The worker pauses each partition whose own buffer is full. Counting the task's whole
    # buffer would pause the empty partition the task is waiting for, and nothing would ever
    # come: a deadlock seen on a pre-loaded join input (the bid side fetched first).
    task, _ = merged_count_task()
    task.wait_for_unfetched = True
    task.add_records("left", 3, [raw(f"l{i}", 100 + i, i) for i in range(6000)])
    assert drain(task) == 0, "right-3 may still hold older records"
    assert task.backpressure_depth(("left", 3)) == 6000
    assert task.backpressure_depth(("right", 3)) == 0, "the awaited partition stays fetched"


def test_records_for_unowned_partitions_are_refused():
    task, _ = merged_count_task()
    with pytest.raises(StreamsError, match="does not own left-0"):
        task.add_records("left", 0, [raw("x", 1, 0)])


def test_deserialization_failure_fails_by_default_naming_the_record():
    builder = StreamsBuilder()
    builder.stream("nums", key_serde=S, value_serde=serdes.long()).to("out")
    (sub,) = builder.build().subtopologies("app")
    task = StreamTask((0, 0), sub, StreamsConfig(application_id="app"), None, Collector())
    task.add_records("nums", 0, [ConsumedRecord(b"k", b"bad", 1, 17)])
    with pytest.raises(SerializationError, match="nums-0@17"):
        task.process_one(0)


def test_log_and_continue_skips_and_sends_to_dead_letter_topic():
    builder = StreamsBuilder()
    builder.stream("nums", key_serde=S, value_serde=serdes.long()).to("out")
    (sub,) = builder.build().subtopologies("app")
    config = StreamsConfig(
        application_id="app",
        default_deserialization_exception_handler="log_and_continue",
        dead_letter_topic="dlq",
    )
    collector = Collector()
    task = StreamTask((0, 0), sub, config, None, collector)
    good = struct.pack(">q", 7)
    task.add_records(
        "nums", 0, [ConsumedRecord(b"k", b"bad", 1, 0), ConsumedRecord(b"k", good, 2, 1)]
    )
    drain(task)
    assert collector.to("dlq") == [("dlq", b"k", b"bad", 1, None)]
    assert collector.to("out") == [("out", b"k", good, 2, None)]
    assert task.metrics.get("deserialization-errors") == 1
    assert task.committable_offsets() == {("nums", 0): 2}


def test_a_dirty_close_drops_cached_results_instead_of_flushing_them(store_type, tmp_path):
    """A crash or an abandoned transaction must not push cached writes anywhere."""
    config = StreamsConfig(application_id="app", cache_max_bytes=1024 * 1024)
    task, collector = merged_count_task(config, store_type, tmp_path)
    task.initialize()
    task.add_records("left", 3, [raw("a", 10, 0), raw("a", 11, 1), raw("b", 12, 2)])
    drain(task)
    assert collector.to("counts") == [], "the cache holds the counts until a flush"
    task.close(clean=False)
    assert collector.to("counts") == [], "a dirty close forwarded cached results"
    changelog = [s for s in collector.sent if s[0].endswith("-changelog")]
    assert changelog == [], "a dirty close wrote cached results to the changelog"


def test_a_clean_close_after_flush_keeps_every_result(store_type, tmp_path):
    config = StreamsConfig(application_id="app", cache_max_bytes=1024 * 1024)
    task, collector = merged_count_task(config, store_type, tmp_path)
    task.initialize()
    task.add_records("left", 3, [raw("a", 10, 0), raw("a", 11, 1), raw("b", 12, 2)])
    drain(task)
    task.flush()
    task.close()
    counts = {k.decode(): struct.unpack(">q", v)[0] for _t, k, v, _ts, _p in collector.to("counts")}
    assert counts == {"a": 2, "b": 1}


class _PunctuatingLogger:
    """Logs each record and each stream-time punctuation, in the order the task runs them."""

    def __init__(self, log: list) -> None:
        self.log = log

    def init(self, context) -> None:
        from fluvial.processor_api import PunctuationType

        self.context = context
        context.schedule(10, PunctuationType.STREAM_TIME, self.punctuate)

    def punctuate(self, now_ms: int) -> None:
        self.log.append(("punctuate", now_ms, self.context.current_stream_time_ms()))

    def process(self, record) -> None:
        self.log.append(("record", record.key, record.timestamp_ms, self.context.topic,
                         self.context.offset, self.context.current_stream_time_ms()))  # fmt: skip
        self.context.forward(record)

    def close(self) -> None:
        pass


def _logging_task(log: list):
    builder = StreamsBuilder()
    merged = builder.stream("left", key_serde=S, value_serde=S).merge(
        builder.stream("right", key_serde=S, value_serde=S)
    )
    merged.process(lambda: _PunctuatingLogger(log)).to("out")
    config = StreamsConfig(application_id="app", cache_max_bytes=0)
    (sub,) = builder.build().subtopologies(config.application_id)
    collector = Collector()
    return StreamTask((0, 3), sub, config, None, collector), collector


@pytest.mark.parametrize("batch", [1, 2, 7, 1000])
def test_a_batch_runs_exactly_what_record_at_a_time_runs(batch: int):
    """Record choice across partitions, stream time and its punctuations, and each output in
    emission order: a batch of any size changes none of them."""
    left = [raw(f"l{i}", ts, i) for i, ts in enumerate([3, 14, 9, 40, 41, 22, 60])]
    right = [raw(f"r{i}", ts, 100 + i) for i, ts in enumerate([5, 12, 33, 31, 70])]

    one_log: list = []
    one, one_out = _logging_task(one_log)
    one.add_records("left", 3, left)
    one.add_records("right", 3, right)
    while one.process_one(0):
        one.punctuate_stream_time()

    batch_log: list = []
    batched, batched_out = _logging_task(batch_log)
    batched.add_records("left", 3, left)
    batched.add_records("right", 3, right)
    taken = []
    while n := batched.process_batch(batch, 0):
        taken.append(n)

    assert batch_log == one_log
    assert batched_out.sent == one_out.sent
    assert sum(taken) == len(left) + len(right) and max(taken) <= batch
    assert batched.committable_offsets() == one.committable_offsets()
    assert batched.metrics.get("records-processed") == len(left) + len(right)
    assert [e for e in one_log if e[0] == "punctuate"], "the case exercises punctuation"
