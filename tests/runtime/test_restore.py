"""A store restored from its changelog holds exactly what the changelog committed, no more.

A table's store is restored into a fresh state directory from a changelog written beforehand:
several reads' worth of records per partition, updates, tombstones and an aborted transaction
under exactly-once; under at-least-once, records past the changelog end that the last commit
recorded. The restored store is read back through interactive queries, and the restore's
progress metrics must reach their total exactly.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.iq.queries import KeyValueView, StoreUnavailableError
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.metrics import WorkerMetrics
from fluvial.runtime import Application
from fluvial.runtime.restore import BATCH
from fluvial.topology.topology import Topology
from tests.event_times import event_time_base_ms
from tests.runtime.harness import committed_offset, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

PARTITIONS = 2
STORE = "kv"
# Enough keys that every partition's restore takes several reads.
KEYS = 3 * BATCH * PARTITIONS


def table_topology(input_topic: str, store_type: str = "rocksdb") -> Topology:
    builder = StreamsBuilder()
    builder.table(input_topic,
                  materialized=Materialized.as_(STORE).with_store_type(store_type),
                  key_serde=serdes.string(), value_serde=serdes.string())  # fmt: skip
    return builder.build()


def changelog_of(application_id: str) -> str:
    [sub] = table_topology("input").subtopologies(application_id)
    return sub.changelog_topics()[STORE]


def _producer(bootstrap: str, **settings: str) -> Producer:
    # Kafka's Java partitioner: each key in the partition whose task owns it.
    return Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                     "partitioner": "murmur2_random", "linger.ms": 5, **settings})  # fmt: skip


def _ends(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restore-test-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                for p in range(PARTITIONS)}  # fmt: skip
    finally:
        consumer.close()


def _restored(metrics: list[WorkerMetrics]) -> bool:
    return sum(m.stores_to_restore for m in metrics) > 0 and all(
        m.stores_restored >= m.stores_to_restore for m in metrics
    )


def _entries(app: Application) -> dict[str, str]:
    def read() -> dict[str, str] | None:
        app.raise_if_failed()
        try:
            # Nothing is processed after the restore, so the latest state is the committed one
            # (and an in-memory store answers only for the latest).
            view = app.store(STORE, isolation="latest")
            assert isinstance(view, KeyValueView)
            return dict(view.all())
        except StoreUnavailableError:
            return None  # not running yet

    return wait_until(read, 120, "the restored store to answer", interval_s=0.1)


@pytest.mark.parametrize("store_type", ["rocksdb", "in_memory"])
def test_a_fresh_state_directory_restores_exactly_the_committed_changelog(
    bootstrap_servers: str,
    topic_factory: Callable[..., str],
    app_id_factory: Callable[[], str],
    tmp_path: Path,
    store_type: str,
) -> None:
    app_id = app_id_factory()
    input_topic = topic_factory("input", partitions=PARTITIONS)
    changelog = changelog_of(app_id)
    create_topics(bootstrap_servers,
                  [TopicSpec(changelog, PARTITIONS, config={"cleanup.policy": "compact"})])  # fmt: skip
    base = event_time_base_ms()
    expected: dict[str, str] = {}
    producer = _producer(bootstrap_servers, **{"transactional.id": f"{app_id}-writer"})
    producer.init_transactions(30)
    # Committed transactions of 250 records: every key written, then a third of them updated
    # and a fifth deleted (a tombstone), so the restore must apply them in offset order.
    writes: list[tuple[str, str | None]] = [(f"key-{i:05d}", f"first-{i}") for i in range(KEYS)]
    writes += [(f"key-{i:05d}", f"second-{i}") for i in range(0, KEYS, 3)]
    writes += [(f"key-{i:05d}", None) for i in range(0, KEYS, 5)]
    for start in range(0, len(writes), 250):
        producer.begin_transaction()
        for n, (key, value) in enumerate(writes[start : start + 250], start):
            producer.produce(changelog, None if value is None else value.encode(), key.encode(),
                             timestamp=base + n)  # fmt: skip
        producer.commit_transaction(30)
    for key, value in writes:
        if value is None:
            expected.pop(key, None)
        else:
            expected[key] = value
    # An aborted transaction: its records are on the log, and no read_committed reader sees them.
    producer.begin_transaction()
    for i in range(0, KEYS, 7):
        producer.produce(changelog, b"aborted", f"key-{i:05d}".encode(), timestamp=base)
    producer.produce(changelog, b"aborted", b"never-committed", timestamp=base)
    producer.flush(30)
    producer.abort_transaction(30)
    ends = _ends(bootstrap_servers, changelog)

    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2",
                           state_dir=str(tmp_path / "state"))  # fmt: skip
    _restore_and_check(table_topology(input_topic, store_type), config, expected, ends)


def test_at_least_once_restores_only_up_to_the_committed_changelog_end(
    bootstrap_servers: str,
    topic_factory: Callable[..., str],
    app_id_factory: Callable[[], str],
    tmp_path: Path,
) -> None:
    app_id = app_id_factory()
    input_topic = topic_factory("input", partitions=PARTITIONS)
    topology = table_topology(input_topic)
    base = event_time_base_ms()
    producer = _producer(bootstrap_servers)
    expected = {f"key-{i:05d}": f"value-{i}" for i in range(KEYS)}
    for n, (key, value) in enumerate(expected.items()):
        producer.produce(input_topic, value.encode(), key.encode(), timestamp=base + n)
    assert producer.flush(60) == 0

    config = StreamsConfig(application_id=app_id, bootstrap_servers=bootstrap_servers,
                           processing_guarantee="at_least_once", commit_interval_ms=100,
                           state_dir=str(tmp_path / "state"))  # fmt: skip

    def committed() -> int:
        return sum(max(0, committed_offset(bootstrap_servers, app_id, input_topic, p))
                   for p in range(PARTITIONS))  # fmt: skip

    with Application(topology, config) as app:
        wait_until(lambda: committed() == KEYS or app.raise_if_failed(), 120,
                   "every input record to be committed")  # fmt: skip
    changelog = changelog_of(app_id)
    committed_ends = _ends(bootstrap_servers, changelog)
    # Changelog records past the ends the last commit recorded: writes of input that, had the
    # worker crashed, would be processed again. A restore must not apply them.
    for i in range(2 * PARTITIONS):
        producer.produce(changelog, b"uncommitted", f"ghost-{i}".encode(), timestamp=base)
    assert producer.flush(60) == 0
    assert _ends(bootstrap_servers, changelog) != committed_ends

    fresh = config.with_overrides(state_dir=str(tmp_path / "fresh"))
    _restore_and_check(topology, fresh, expected, committed_ends)


def _restore_and_check(
    topology: Topology,
    config: StreamsConfig,
    expected: dict[str, str],
    ends: dict[int, tuple[int, int]],
) -> None:
    """Start on a fresh state directory, wait for the restore, and check the store holds
    ``expected`` and the progress counted exactly the changelog's offsets up to ``ends``
    (transaction markers among them)."""
    with Application(topology, config) as app:
        wait_until(lambda: _restored(app.metrics()) or app.raise_if_failed(), 120,
                   "the stores to be restored")  # fmt: skip
        entries = _entries(app)
        metrics = app.metrics()
    assert entries == expected
    total = sum(high - low for low, high in ends.values())
    assert sum(m.restore_total for m in metrics) == total
    assert sum(m.restored for m in metrics) == total
