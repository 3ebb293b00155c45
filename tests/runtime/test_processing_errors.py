"""A user function that raises, under exactly-once with a dead-letter topic, through ``fluvial run``.

The app (apps/payload_time.py) takes event time from a JSON field and skips the records its
function raises on (processing_exception_handler="log_and_continue"). The process that
runs the task (``fluvial run`` on the local engine, the slot's Python worker on Spark) is killed
with -9 while a dead letter sits in an open transaction; after the restart every dead letter is
in the read_committed dead-letter topic exactly once, and every good record in the output once.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.event_times import event_time_base_ms
from tests.runtime.harness import SparkRunner, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(__file__).parent / "apps" / "payload_time.py"
COUNT = 30
BAD = [n for n in range(COUNT) if n % 10 == 3]
HOLD_AT = 14  # the record after the dead letter of 13


def produce_numbers(bootstrap: str, topic: str, numbers: range, base_ms: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for n in numbers:
        # The Kafka timestamp is not the event time: the payload's "ts" is.
        value = json.dumps({"n": n, "ts": base_ms + 10 * n}).encode()
        producer.produce(topic, key=f"k{n}".encode(), value=value, timestamp=base_ms + 5000 + n,
                         partition=0)  # fmt: skip
    assert producer.flush(30) == 0


def dead_numbers(bootstrap: str, topic: str, *, committed_only: bool = True) -> list[int]:
    return [json.loads(m.value())["n"]
            for m in read_topic(bootstrap, topic, committed_only=committed_only)]  # fmt: skip


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_kill_9_between_a_dead_letter_and_its_commit_leaves_it_exactly_once(
    engine: str, bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    (marks / "hold").touch()
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("numbers"),
                         topic_factory("checked"), tmp_path / "state", commit_ms=500,
                         engine=engine, app=APP, lease_ms=2000,
                         extra_env={"FLUVIAL_TEST_MARKS": str(marks),
                                    "FLUVIAL_TEST_HOLD_AT": str(HOLD_AT),
                                    # Spark: the config's extractor, which travels as APP.py.
                                    "FLUVIAL_TEST_DEFAULT_EXTRACTOR": str(int(engine == "spark")),
                                    "FLUVIAL_TEST_DLT": topic_factory("dead")})  # fmt: skip
    dead_topic = runner.extra_env["FLUVIAL_TEST_DLT"]
    base_ms = event_time_base_ms()
    produce_numbers(bootstrap_servers, runner.input_topic, range(COUNT), base_ms)
    runner.start()
    wait_until(lambda: (marks / "held").exists() or runner.proc.poll() is not None, 180,
               "the app to hold the record after a failing one")  # fmt: skip
    # 13's dead letter is written, in the transaction the held record keeps open.
    wait_until(lambda: 13 in dead_numbers(bootstrap_servers, dead_topic, committed_only=False),
               60, "the dead letter of 13 in the log")  # fmt: skip
    assert 13 not in dead_numbers(bootstrap_servers, dead_topic), "committed before the kill"
    if engine == "local":
        runner.kill9()
        (marks / "hold").unlink()
        runner.start()
    else:
        # The Python worker running the slot: Spark runs the slot again, and the new attempt
        # fences the killed one's transactional id.
        os.kill(int((marks / "held").read_text()), signal.SIGKILL)
        (marks / "hold").unlink()
    try:
        wait_until(
            lambda: len(read_topic(bootstrap_servers, runner.output_topic)) >= COUNT - len(BAD),
            180,
            "every good record in the committed output",
        )
    finally:
        assert runner.stop() == 0, runner.output()[-5000:]
    output = read_topic(bootstrap_servers, runner.output_topic)
    assert [int.from_bytes(m.value(), "big") for m in output] == [
        n for n in range(COUNT) if n not in BAD
    ]
    # Event time from the payload, not the Kafka timestamp.
    assert [m.timestamp()[1] for m in output] == [
        base_ms + 10 * n for n in range(COUNT) if n not in BAD
    ]
    committed = read_topic(bootstrap_servers, dead_topic)
    assert [json.loads(m.value())["n"] for m in committed] == BAD, "each dead letter once"
    assert 13 in dead_numbers(bootstrap_servers, dead_topic, committed_only=False)
    assert len(read_topic(bootstrap_servers, dead_topic, committed_only=False)) > len(BAD), (
        "the killed transaction's dead letter is in the log, aborted"
    )
    headers = dict(committed[1].headers())
    assert headers["fluvial.node"] == b"check"
    assert headers["fluvial.error"] == b"ValueError: no good: 13"
    assert headers["fluvial.topic"] == runner.input_topic.encode()
    assert (headers["fluvial.partition"], headers["fluvial.offset"]) == (b"0", b"13")


def test_a_source_with_auto_offset_reset_latest_skips_what_was_there_before_it_started(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    runner = SparkRunner(bootstrap_servers, unique_name("app"), topic_factory("numbers"),
                         topic_factory("checked"), tmp_path / "state", engine="local", app=APP,
                         extra_env={"FLUVIAL_TEST_MARKS": str(marks), "FLUVIAL_TEST_RESET": "latest",
                                    "FLUVIAL_TEST_DLT": topic_factory("dead")})  # fmt: skip
    base_ms = event_time_base_ms()
    produce_numbers(bootstrap_servers, runner.input_topic, range(10), base_ms)
    runner.start()
    runner.wait_ready()
    # When the app's consumer settles on the end is its own affair: write until one arrives.
    later = iter(range(100, 1000))

    def one_more_arrived() -> bool:
        produce_numbers(bootstrap_servers, runner.input_topic, range(next(later), 1000, 1000),
                        base_ms)  # fmt: skip
        return bool(read_topic(bootstrap_servers, runner.output_topic))

    try:
        wait_until(one_more_arrived, 60, "a record written after the start", interval_s=0.5)
    finally:
        assert runner.stop() == 0, runner.output()[-5000:]
    values = [int.from_bytes(m.value(), "big") for m in read_topic(bootstrap_servers,
                                                                   runner.output_topic)]  # fmt: skip
    assert values and all(v >= 100 for v in values), values
