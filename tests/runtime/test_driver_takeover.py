"""A second driver of the same application takes over, and the first stops by itself.

A cluster manager may start a new driver while the old one still lives: partitioned from the
cluster, or frozen and resumed later. Here driver A is frozen (``SIGSTOP`` of its whole process
group: on Spark its JVM and Python workers too, as a frozen machine), driver B starts on
another "machine" (state directory) and processes, then A resumes while B is idle. A must
stop with a clear error, having written and committed nothing (no offset of its topics or
its group moves), and the output must hold every input record's revision exactly once.

A runs two slots and B one, so B must also fence the slot it never runs itself: a slot of A
that B left alone would go on committing beside B, and its output would show up twice.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from fluvial import serdes
from tests.runtime.harness import (
    PageView,
    SparkRunner,
    generate_views,
    open_transaction_records,
    read_topic,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REGROUP = Path(__file__).parents[1] / "spark" / "apps" / "regroup.py"
FENCED = "was fenced: a newer driver of the application"
ENGINES = ["local", pytest.param("spark", marks=pytest.mark.spark)]


def produce_keyed(bootstrap: str, topic: str, views: list[PageView]) -> None:
    """Keyed records, so both input partitions (both of A's slots) get some."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for view in views:
        producer.produce(topic, key=view.key.encode(), value=view.value())
    assert producer.flush(30) == 0


def revisions(bootstrap: str, topic: str) -> dict[str, list[int]]:
    """Each category's committed counts, in output order."""
    found: dict[str, list[int]] = defaultdict(list)
    for msg in read_topic(bootstrap, topic):
        found[msg.key().decode()].append(serdes.long().deserialize(topic, msg.value()))
    return found


def counted(bootstrap: str, topic: str) -> int:
    return sum(counts[-1] for counts in revisions(bootstrap, topic).values())


def signal_group(runner: SparkRunner, sig: int) -> None:
    """The driver and all it started (``spawn`` gives it a process group of its own)."""
    assert runner.proc is not None
    os.killpg(runner.proc.pid, sig)


def uncommitted_keys(bootstrap: str, topic: str) -> list[bytes]:
    """The keys of ``topic``'s records past each partition's last stable offset: written by
    transactions still open."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "uncommitted",
                         "isolation.level": "read_uncommitted", "enable.auto.commit": False})  # fmt: skip
    try:
        keys = []
        for p in consumer.list_topics(topic, timeout=10).topics[topic].partitions:
            end = consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            stable = end - open_transaction_records(bootstrap, topic, p)
            if stable >= end:
                continue
            consumer.assign([TopicPartition(topic, p, stable)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None or msg.error():
                    continue
                keys.append(msg.key())
                if msg.offset() >= end - 1:
                    break
        return keys
    finally:
        consumer.close()


def _category(key: bytes) -> str:
    """A repartition key's category (JSON, the default key serde, or plain text)."""
    try:
        return str(json.loads(key))
    except ValueError:
        return key.decode()


def freeze_mid_transactions(runner: SparkRunner, views: list[PageView], start: int) -> int:
    """Feed ``views[start:]`` slice by slice until both of ``runner``'s slots are caught with a
    transaction open (state changes of both count tasks, not yet committed), and freeze it
    there. Returns how many views are in the input by then.

    A commit logs the changelog only at its end, so a slot's open state changes show in the
    output instead: every update writes a revision at once (no cache), keyed by its category,
    and a category's counts live in the task of its repartition partition, that is its slot's.
    """
    bootstrap = runner.bootstrap
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "topics"})
    try:
        topics = consumer.list_topics(timeout=10).topics
    finally:
        consumer.close()
    [repartition] = [t for t in topics if t.startswith(f"{runner.app_id}-") and
                     t.endswith("-repartition")]  # fmt: skip
    slot_of: dict[str, int] = {}

    def both_open() -> bool:
        open_categories = {key.decode() for key in uncommitted_keys(bootstrap, runner.output_topic)}
        if not open_categories <= set(slot_of):
            for p in (0, 1):  # which slot counts which category (read with the open records)
                for msg in read_topic(bootstrap, repartition, committed_only=False, partition=p):
                    if msg.key() is not None:  # not a writer's progress record
                        slot_of[_category(msg.key())] = p
        return {slot_of.get(c) for c in open_categories} >= {0, 1}

    end = start
    while end < start + 700:
        produce_keyed(bootstrap, runner.input_topic, views[end : end + 100])
        end += 100
        try:
            wait_until(both_open, 20, "both slots inside a transaction", interval_s=0.05)
        except AssertionError:
            continue  # committed before the test looked: the next slice
        signal_group(runner, signal.SIGSTOP)
        if both_open():
            return end
        signal_group(runner, signal.SIGCONT)
    raise AssertionError("the runner committed every slice before it could be frozen mid-way")


def footprint(bootstrap: str, app_id: str, input_topic: str, output_topic: str) -> dict:
    """Every offset the application's writes and commits move: the log end of the output and
    of each internal topic (committed or not), and the group's committed offsets."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": app_id,
                         "enable.auto.commit": False})  # fmt: skip
    try:
        topics = consumer.list_topics(timeout=10).topics
        internal = sorted(t for t in topics if t.startswith(f"{app_id}-"))
        found: dict = {}
        for topic in [output_topic, *internal]:
            for p in topics[topic].partitions:
                found[("end", topic, p)] = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10
                )[1]
        sources = [input_topic, *(t for t in internal if t.endswith("-repartition"))]
        positions = [TopicPartition(t, p) for t in sources for p in topics[t].partitions]
        for tp in consumer.committed(positions, timeout=10):
            found[("committed", tp.topic, tp.partition)] = tp.offset
        return found
    finally:
        consumer.close()


# Two drivers start, each a Spark JVM on the Spark engine: 100 s each under load.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("engine", [pytest.param("local", marks=pytest.mark.soak), ENGINES[1]])
def test_a_second_driver_takes_over_and_the_first_stops_by_itself(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, engine: str
) -> None:
    views = generate_views(seed=41, count=2400)
    expected = Counter(view.category for view in views)
    input_topic = topic_factory("views", partitions=2)
    output_topic = topic_factory("counts")
    app_id = unique_name("app")

    def driver(name: str, slots: int, commit_ms: int, lease_ms: int) -> SparkRunner:
        # Caching off: every input record yields exactly one revision of its category's count.
        return SparkRunner(bootstrap_servers, app_id, input_topic, output_topic,
                           tmp_path / name, app=REGROUP, engine=engine, commit_ms=commit_ms,
                           lease_ms=lease_ms, workers=slots,
                           extra_env={"FLUVIAL_TEST_CACHE_BYTES": "0"})  # fmt: skip

    def written() -> dict:
        return footprint(bootstrap_servers, app_id, input_topic, output_topic)

    # A commits every 25 s, so it is caught with transactions open, and they would stay open
    # for its transaction timeout (250 s): longer than B is given to catch up. Only B fencing
    # both of A's slots (the one it runs itself, and the one it does not) lets B read on.
    a, b = driver("a", 2, 25_000, 30_000), driver("b", 1, 300, 2000)
    a.start()
    a.wait_ready(180)
    produce_keyed(bootstrap_servers, input_topic, views[:800])
    wait_until(lambda: counted(bootstrap_servers, output_topic) == 800, 180, "A to count 800")
    if engine == "spark":
        # Past its first leases: A's slots hold warm Workers, cached for the next lease.
        wait_until(lambda: len([e for e in a.leases() if "slots" in e]) >= 2, 120, "two leases")
    fed = freeze_mid_transactions(a, views, 800)
    try:
        b.start()
        b.wait_ready(180)
        produce_keyed(bootstrap_servers, input_topic, views[fed:1600])
        wait_until(lambda: counted(bootstrap_servers, output_topic) == 1600, 180,
                   "B to count everything so far, A frozen")  # fmt: skip
        # B has committed it all and is idle: from here on, only A could write or commit.
        snapshots = [written()]

        def settled() -> bool:
            time.sleep(2)
            snapshots.append(written())
            return snapshots[-1] == snapshots[-2]

        wait_until(settled, 60, "B to be idle")
    finally:
        resumed = time.time()
        signal_group(a, signal.SIGCONT)
    try:
        code = a.wait(120)
    except Exception:
        raise AssertionError("A kept running after it resumed:\n" + a.output()[-5000:]) from None
    assert code != 0, a.output()[-5000:]
    assert FENCED in a.output(), a.output()[-5000:]
    # A resumed with work of its own that it had not committed (and on Spark, a lease under
    # way); it wrote and committed nothing of it, nor anything else.
    assert written() == snapshots[-1]
    produce_keyed(bootstrap_servers, input_topic, views[1600:])
    try:
        wait_until(lambda: {k: c[-1] for k, c in revisions(bootstrap_servers,
                                                           output_topic).items()} == expected,
                   180, "B to count every view")  # fmt: skip
    finally:
        assert b.stop() == 0, b.output()[-5000:]
    # Exactly once: each category's revisions are 1, 2, ..., its count. A record that both
    # drivers processed shows as a repeated count, one that neither did as a gap.
    found = revisions(bootstrap_servers, output_topic)
    assert set(found) == set(expected)
    for category, counts in found.items():
        assert counts == list(range(1, expected[category] + 1)), (
            f"{category}: revisions {counts} are not exactly 1..{expected[category]}"
        )
    # B never had to fight for a slot: nothing of A fenced it back.
    assert "fenced" not in b.output(), b.output()[-5000:]
    if engine == "spark":
        # A launched no lease after it resumed: the one that ended then was under way.
        late = [entry for entry in a.leases() if entry["t"] > resumed]
        assert len({entry["lease"] for entry in late}) <= 1, late
        assert [e for e in b.leases() if "failed" in e] == [], b.leases()
        attempts = [s["attempt"] for e in b.leases() for s in e.get("slots", [])]
        assert attempts and set(attempts) == {0}, b.leases()
