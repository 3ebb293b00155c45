"""The changelog ends committed with the input offsets cover every state change they produced.

An at-least-once restart restores changelogs only up to those ends (the changelog may run ahead
of the committed input). Ends that leave out the last interval's state changes would lose them.
"""

from __future__ import annotations

import base64
import shutil
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial import JoinWindows, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import ConfigError
from fluvial.processor.completeness import WriterState
from fluvial.runtime import Application
from fluvial.runtime.commit_metadata import CommitMetadata, check_commit_metadata
from fluvial.runtime.horizon import Needed
from tests.event_times import event_time_base_ms
from tests.runtime.harness import read_topic, wait_until

pytestmark = [pytest.mark.kafka]


def committed(bootstrap: str, group: str, topic: str) -> TopicPartition:
    """The group's committed offset and metadata of partition 0 (see :func:`committed_all`)."""
    return committed_all(bootstrap, group, topic, 1)[0]


def committed_all(bootstrap: str, group: str, topic: str, partitions: int) -> list[TopicPartition]:
    """The group's committed offsets and metadata per partition; retried while the coordinator
    is loading."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return wait_until(lambda: _committed(consumer, topic, partitions), 30,
                          "the group coordinator")  # fmt: skip
    finally:
        consumer.close()


def _committed(consumer: Consumer, topic: str, partitions: int) -> list[TopicPartition] | None:
    try:
        return consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    except KafkaException:  # NOT_COORDINATOR or loading on a fresh cluster: ask again
        return None


def count_clicks(source: str, out: str) -> StreamsBuilder:
    """Clicks counted per page into the store ``counts``, the counts written to ``out``."""
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
        .to_stream()
        .to(out, value_serde=serdes.long())
    )
    return builder


def test_committed_changelog_ends_include_the_intervals_last_writes(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    source, out = topic_factory("clicks"), topic_factory("counts")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for i in range(60):
        producer.produce(source, key=f"page-{i % 6}".encode(), value=b"x", partition=0)
    assert producer.flush(30) == 0

    builder = count_clicks(source, out)
    app_id = unique_name("app")
    # With the record cache on, the counts reach the changelog only when the cache is flushed,
    # right before the offsets are committed.
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="at_least_once", commit_interval_ms=1000,
                           state_dir=str(tmp_path))  # fmt: skip
    changelog = f"{app_id}-counts-changelog"
    with Application(builder.build(), config) as app:
        wait_until(lambda: committed(bootstrap_servers, app_id, source).offset == 60, 60,
                   "the input offsets to be committed")  # fmt: skip
    app.raise_if_failed()

    metadata = CommitMetadata.decode(committed(bootstrap_servers, app_id, source).metadata)
    probe = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": "probe"})
    _, changelog_end = probe.get_watermark_offsets(TopicPartition(changelog, 0), timeout=10)
    probe.close()
    assert changelog_end > 0
    assert metadata.changelog_ends == {(changelog, 0): changelog_end}


def test_exactly_once_commits_each_changelog_partitions_end_and_every_keys_last_state(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """In a transaction only each changelog partition's last record gets a delivery report; the
    ends committed must still be exact. The changelog holds each key's last state per commit,
    and replaying it gives the final counts."""
    partitions, records = 2, 400
    source, out = topic_factory("clicks", partitions), topic_factory("counts", partitions)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    base = event_time_base_ms()
    for i in range(records):
        producer.produce(source, key=f"page-{i % 7}".encode(), value=b"x", timestamp=base + i)
        if i == records // 2:
            assert producer.flush(30) == 0  # a backlog, then the rest while it runs
    builder = count_clicks(source, out)
    app_id = unique_name("app")
    # No record cache: every update is a revision; the changelog gets each key's last per commit.
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", commit_interval_ms=100,
                           cache_max_bytes=0, state_dir=str(tmp_path))  # fmt: skip
    changelog = f"{app_id}-counts-changelog"

    def offsets() -> int:
        tps = committed_all(bootstrap_servers, app_id, source, partitions)
        return sum(max(tp.offset, 0) for tp in tps)

    with Application(builder.build(), config) as app:
        assert producer.flush(30) == 0
        wait_until(lambda: offsets() == records, 90, "every input offset to be committed")
    app.raise_if_failed()

    committed_tps = committed_all(bootstrap_servers, app_id, source, partitions)
    ends: dict[tuple[str, int], int] = {}
    for tp in committed_tps:
        ends.update(CommitMetadata.decode(tp.metadata).changelog_ends)
    state_changes, replayed = 0, {}
    for p in range(partitions):
        data = read_topic(bootstrap_servers, changelog, partition=p)
        state_changes += len(data)
        # A committed end is the offset after the partition's last state change.
        assert ends[(changelog, p)] == data[-1].offset() + 1
        replayed.update((m.key().decode(), int.from_bytes(m.value(), "big")) for m in data)
    assert replayed == {f"page-{k}": len(range(k, records, 7)) for k in range(7)}
    assert state_changes < records, "a key's updates within one commit fold into one record"


def test_a_task_with_many_window_stores_commits_and_restores_them_all(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """24 windowed counts in one sub-topology: their changelog offsets alone pass the broker's
    4096-byte metadata limit as plain JSON, so the commit carries them compressed."""
    stores = 24
    source = topic_factory("clicks")
    base = event_time_base_ms()
    base -= base % 24_000  # every window size below divides 24 s: deterministic windows
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})

    def produce(first: int, last: int, key: Callable[[int], str]) -> None:
        for i in range(first, last):
            producer.produce(source, key=key(i).encode(), value=b"x", partition=0,
                             timestamp=base + i * 100)  # fmt: skip
        assert producer.flush(30) == 0

    produce(0, 200, lambda i: f"page-{i % 5}")
    builder = StreamsBuilder()
    grouped = builder.stream(source, key_serde=serdes.string(), value_serde=serdes.string())
    grouped = grouped.group_by_key()
    for n in range(stores):
        windows = TimeWindows.of_size_and_grace(size_ms=1000 * (n + 1), grace_ms=0)
        grouped.windowed_by(windows).count(materialized=Materialized.as_(f"window-counts-{n:02d}"))
    app_id = unique_name("app")
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", commit_interval_ms=300,
                           state_dir=str(tmp_path))  # fmt: skip
    topology = builder.build()
    with Application(topology, config) as app:
        wait_until(lambda: committed(bootstrap_servers, app_id, source).offset == 200, 120,
                   "the input offsets to be committed")  # fmt: skip
    app.raise_if_failed()
    raw = committed(bootstrap_servers, app_id, source).metadata
    prefix = CommitMetadata.COMPRESSED_PREFIX
    assert raw.startswith(prefix), raw[:80]
    plain = zlib.decompress(base64.b85decode(raw[len(prefix) :].encode()))
    assert len(raw) < 4096 < len(plain)
    metadata = CommitMetadata.decode(raw)
    assert len(metadata.changelog_ends) == stores and len(metadata.needed) == stores

    # A restart without local state restores every store from its changelog and goes on.
    shutil.rmtree(tmp_path / app_id)
    produce(200, 220, lambda i: "page-0")
    with Application(topology, config) as app:
        wait_until(lambda: committed(bootstrap_servers, app_id, source).offset == 220, 120,
                   "the input offsets after the restart")  # fmt: skip
        # Committed reads show a commit once its writes reach the stores, just after the
        # offsets: wait for the values rather than read once.
        # [base, base + 24 s): page-0's 40 records from before the restart and 20 after;
        # [base + 21 s, base + 22 s): 10 records, all after the restart.
        wait_until(
            lambda: (
                app.store("window-counts-23").fetch("page-0", base),
                app.store("window-counts-00").fetch("page-0", base + 21_000),
            ) == (60, 10),
            60, "the restored and the new counts",
        )  # fmt: skip
    app.raise_if_failed()


def test_a_task_whose_metadata_cannot_fit_is_refused_before_anything_starts(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """Even compressed, 100 window stores in one sub-topology pass the broker's limit: the
    application refuses to start, with the fix, before it creates a single topic."""
    builder = StreamsBuilder()
    grouped = builder.stream(topic_factory("clicks"), key_serde=serdes.string(),
                             value_serde=serdes.string()).group_by_key()  # fmt: skip
    for n in range(100):
        windows = TimeWindows.of_size_and_grace(size_ms=1000 * (n + 1), grace_ms=0)
        grouped.windowed_by(windows).count(materialized=Materialized.as_(f"window-counts-{n:02d}"))
    app_id = unique_name("app")
    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           state_dir=str(tmp_path))  # fmt: skip
    with pytest.raises(ConfigError, match=r"100 changelogged stores.*Split the sub-topology"):
        Application(builder.build(), config).start()
    topics = AdminClient({"bootstrap.servers": bootstrap_servers}).list_topics(timeout=30).topics
    assert not [t for t in topics if t.startswith(app_id)]


def test_metadata_round_trips_plain_and_compressed() -> None:
    small = CommitMetadata(5, {("a-changelog", 0): 7}, {("a-changelog", 0): Needed(3, 1, 2)})
    assert small.encode().startswith("fluvial:{")
    assert CommitMetadata.decode(small.encode()) == CommitMetadata(
        5, small.changelog_ends, small.needed, True
    )
    ends = {(f"app-store-{n}-changelog", n % 3): 10**12 + n for n in range(30)}
    needed = {tp: Needed(off - 5, off, off + 1) for tp, off in ends.items()}
    large = CommitMetadata(99, ends, needed).encode()
    assert large.startswith(CommitMetadata.COMPRESSED_PREFIX)
    assert CommitMetadata.decode(large) == CommitMetadata(99, ends, needed, True)
    assert (
        CommitMetadata.decode(CommitMetadata.COMPRESSED_PREFIX + "not-base85!") == CommitMetadata()
    )


def test_the_metadata_a_restart_reads_keeps_every_field_its_partitions_committed() -> None:
    """A task commits one metadata on each of its input partitions; a restart reads the newest
    of them (``latest``). Each field must survive that, the writer states of merged
    repartition partitions too: without them a restart processes again the records it had
    taken out of offset order, counting them twice or dropping them as late."""
    writers = {
        ("app-a-repartition", 1): {
            "0_0": WriterState(high=1_000, idle=False, done=41),
            "0_1": WriterState(high=900, idle=True, done=40),
        },
        ("app-b-repartition", 1): {"0_2": WriterState(high=-1, idle=False, done=-1)},
    }
    committed = CommitMetadata(
        1_000, {("app-store-changelog", 1): 77}, {("app-store-changelog", 1): Needed(3, 1, 2)},
        writers=writers, input_times=(1_000, 400),
    )  # fmt: skip
    read = CommitMetadata.decode(committed.encode())
    assert read.writers == writers
    # Each source topic's newest time: a windowed operator beside a joined table resumes from
    # its own inputs' time (docs/semantics.md, "Tables and event time").
    assert read.input_times == (1_000, 400)
    older = CommitMetadata(500, {("app-store-changelog", 1): 12}, writers={})
    assert CommitMetadata.latest([older, read, read]) == read
    assert CommitMetadata.latest([read, older]) == read


def test_a_restart_reads_the_newest_commit_whichever_partition_carries_it() -> None:
    """A task's commit carries one metadata on every partition it has read; a partition it has
    not read since it started keeps an older one, perhaps with the same stream time (a backlog
    of one writer's older records moves no stream time). The commit sequence decides."""
    tp = ("app-a-repartition", 1)
    older = CommitMetadata(1_000, {("app-store-changelog", 1): 10}, {}, True,
                           {tp: {"0_1": WriterState(1_000, False, 5)}}, sequence=3)  # fmt: skip
    newer = CommitMetadata(1_000, {("app-store-changelog", 1): 20}, {}, True,
                           {tp: {"0_1": WriterState(1_000, False, 9)}}, sequence=4)  # fmt: skip
    assert CommitMetadata.decode(newer.encode()) == newer
    assert CommitMetadata.latest([older, newer]) == newer
    assert CommitMetadata.latest([newer, older]) == newer
    # Commits from before sequences were recorded: the highest stream time, as before.
    legacy = CommitMetadata(900, {("app-store-changelog", 1): 7}, {}, True)
    assert CommitMetadata.latest([CommitMetadata.decode(legacy.encode()), older]) == older


def test_a_join_over_too_many_upstream_partitions_is_refused_before_anything_starts() -> None:
    """Each downstream task commits what it took from every upstream task that writes its
    merged repartition partitions: with enough input partitions that passes the broker's
    limit, and the application would stop at its first commit. It is refused before any topic
    is created, with the two ways out; Kafka Streams' stream time commits no writer states."""
    builder = StreamsBuilder()
    views = builder.stream("views", key_serde=serdes.string(), value_serde=serdes.json())
    clicks = builder.stream("clicks", key_serde=serdes.string(), value_serde=serdes.json())
    (
        views.select_key(lambda k, v: v["page"])
        .join(
            clicks.select_key(lambda k, v: v["page"]),
            lambda a, b: [a, b],
            JoinWindows.of_time_difference_and_grace(1000, 1000),
        )  # fmt: skip
        .to("joined")
    )
    topology = builder.build()

    def check(partitions: int, catch_up: bool = True) -> None:
        config = StreamsConfig(application_id="app", bootstrap_servers="127.0.0.1:9",
                               catch_up_completeness=catch_up)  # fmt: skip
        internal = [t.name for t in topology.internal_topics("app")]
        counts = {t: partitions for t in ["views", "clicks", *internal]}
        check_commit_metadata(topology, config, counts)

    check(32)
    with pytest.raises(ConfigError, match=r"written by 240 upstream tasks.*catch_up_completeness"):
        check(120)
    check(120, catch_up=False)
