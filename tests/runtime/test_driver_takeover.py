"""A second driver of the same application takes over, and the first stops by itself.

A cluster manager may start a new driver while the old one still lives: partitioned from the
cluster, or frozen and resumed later. Here driver A is frozen (``SIGSTOP`` of its whole process
group: on Spark its JVM and Python workers too, as a frozen machine), driver B starts on
another "machine" (state directory) and processes, then A resumes. A must stop with a clear
error without committing anything, and the output must hold every input record's revision
exactly once.

A runs two slots and B one, so B must also fence the slot it never runs itself: a slot of A
that B left alone would go on committing beside B, and its output would show up twice.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial import serdes
from tests.runtime.harness import PageView, SparkRunner, generate_views, read_topic, wait_until

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


# Two drivers start, each a Spark JVM on the Spark engine: 100 s each under load.
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("engine", ENGINES)
def test_a_second_driver_takes_over_and_the_first_stops_by_itself(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, engine: str
) -> None:
    rng = random.Random(41)
    views = generate_views(seed=41, count=2400)
    expected = Counter(view.category for view in views)
    input_topic = topic_factory("views", partitions=2)
    output_topic = topic_factory("counts")
    app_id = unique_name("app")

    def driver(name: str, slots: int) -> SparkRunner:
        # Caching off: every input record yields exactly one revision of its category's count.
        return SparkRunner(bootstrap_servers, app_id, input_topic, output_topic,
                           tmp_path / name, app=REGROUP, engine=engine, commit_ms=300,
                           lease_ms=2000, workers=slots,
                           extra_env={"FLUVIAL_TEST_CACHE_BYTES": "0"})  # fmt: skip

    a, b = driver("a", 2), driver("b", 1)
    a.start()
    a.wait_ready(180)
    produce_keyed(bootstrap_servers, input_topic, views[:800])
    wait_until(lambda: counted(bootstrap_servers, output_topic) == 800, 180, "A to count 800")
    if engine == "spark":
        # Past its first leases: A's slots hold warm Workers, cached for the next lease.
        wait_until(lambda: len([e for e in a.leases() if "slots" in e]) >= 2, 120, "two leases")
    produce_keyed(bootstrap_servers, input_topic, views[800:1200])
    time.sleep(rng.uniform(0.2, 1.0))  # A at work, often inside a transaction
    signal_group(a, signal.SIGSTOP)
    try:
        b.start()
        b.wait_ready(180)
        produce_keyed(bootstrap_servers, input_topic, views[1200:1600])
        wait_until(lambda: counted(bootstrap_servers, output_topic) == 1600, 180,
                   "B to count everything so far, A frozen")  # fmt: skip
    finally:
        resumed = time.time()
        signal_group(a, signal.SIGCONT)
    # Input A would process if it went on.
    produce_keyed(bootstrap_servers, input_topic, views[1600:2000])
    try:
        code = a.wait(120)
    except Exception:
        raise AssertionError("A kept running after it resumed:\n" + a.output()[-5000:]) from None
    assert code != 0, a.output()[-5000:]
    assert FENCED in a.output(), a.output()[-5000:]
    produce_keyed(bootstrap_servers, input_topic, views[2000:])
    try:
        wait_until(lambda: dict((k, c[-1]) for k, c in revisions(bootstrap_servers,
                                output_topic).items()) == expected, 180,
                   "B to count every view")  # fmt: skip
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
    if engine == "spark":
        # A launched no lease after it resumed, and the one it had running committed nothing:
        # any lease that ended after that failed, or its slots processed nothing.
        late = [entry for entry in a.leases() if entry["t"] > resumed]
        assert len(late) <= 1, late
        processed = [s for e in late for s in e.get("slots", []) if s["processed"] > 0]
        assert processed == [], late
        assert [e for e in b.leases() if "failed" in e] == [], "B's leases never failed"
    assert "fenced" not in b.output(), b.output()[-5000:]
