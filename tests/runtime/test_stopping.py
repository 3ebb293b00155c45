"""``fluvial run`` stops within its stop timeout on SIGTERM, even when Kafka is unreachable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics
from tests import processes
from tests.event_times import event_time_base_ms
from tests.runtime.harness import APP, PageView, produce, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STOP_TIMEOUT_S = 4.0
# Python start-up and the process's own teardown on a loaded 2-core machine.
SLACK_S = 20.0


def start_run(
    bootstrap: str, tmp_path: Path, app_id: str, *, commit_interval_ms: int = 500
) -> tuple[subprocess.Popen, Path]:
    env = {
        **os.environ,
        "FLUVIAL_TEST_COMMIT_MS": str(commit_interval_ms),
        "FLUVIAL_TEST_INPUT": "pageviews",
        "FLUVIAL_TEST_OUTPUT": "counts",
        "FLUVIAL_TEST_APP_ID": app_id,
        "FLUVIAL_TEST_BOOTSTRAP": bootstrap,
        "FLUVIAL_TEST_STATE_DIR": str(tmp_path / "state"),
    }
    log = tmp_path / f"{app_id}.log"
    cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", "local",
           "--stop-timeout-s", str(STOP_TIMEOUT_S)]  # fmt: skip
    with open(log, "wb") as out:
        proc = processes.spawn(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return proc, log


def seconds_to_exit_after_sigterm(proc: subprocess.Popen) -> tuple[float, int]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(STOP_TIMEOUT_S + SLACK_S)
    return time.monotonic() - sent, code


def uncommitted_repartition_records(bootstrap: str, app_id: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics
              if t.startswith(f"{app_id}-") and t.endswith("-repartition")]  # fmt: skip
    return sum(len(read_topic(bootstrap, t, committed_only=False)) for t in topics)


def test_sigterm_while_the_brokers_cannot_be_reached_at_start(tmp_path: Path) -> None:
    """Nothing listens on the bootstrap port: start-up blocks in the Kafka client."""
    proc, log = start_run(f"127.0.0.1:{free_port()}", tmp_path, "no-broker")
    wait_until(lambda: "fluvial: running" in log.read_text(), 60, "the run to begin starting")
    elapsed, code = seconds_to_exit_after_sigterm(proc)
    assert code in (1, 143), log.read_text()
    assert elapsed < STOP_TIMEOUT_S + SLACK_S


def test_sigterm_after_the_broker_stopped_answering(tmp_path: Path) -> None:
    """A running application whose only broker hangs (SIGSTOP) still stops on SIGTERM."""
    with LocalKafka(tmp_path / "kafka", port=free_port(), heap="512m") as kafka:
        bootstrap = kafka.bootstrap_servers
        create_topics(bootstrap, [TopicSpec("pageviews"), TopicSpec("counts")])
        # No commit falls due while the test runs: once output shows up uncommitted, the
        # stop has a transaction to commit, and committing it needs the broker.
        proc, log = start_run(bootstrap, tmp_path, "hung-broker", commit_interval_ms=3_600_000)
        broker_pid = kafka.pid(1)
        assert broker_pid is not None
        wait_until(lambda: "Ctrl-C commits and stops" in log.read_text(), 120,
                   "the application to run its tasks")  # fmt: skip
        base_ms = event_time_base_ms()
        produce(bootstrap, "pageviews",
                [PageView(f"user-{i}", "news", 40_000, base_ms + i) for i in range(5)])  # fmt: skip
        # The counts are keyed by category, so the records go through a repartition topic
        # first; there they sit in the open transaction, which only the stop can commit.
        wait_until(lambda: uncommitted_repartition_records(bootstrap, "hung-broker") > 0, 120,
                   "repartition records in the open transaction")  # fmt: skip
        os.kill(broker_pid, signal.SIGSTOP)
        try:
            elapsed, code = seconds_to_exit_after_sigterm(proc)
        finally:
            os.kill(broker_pid, signal.SIGCONT)
    output = log.read_text()
    assert code == 143, output
    assert f"did not stop within {STOP_TIMEOUT_S:g} s" in output
    assert elapsed < STOP_TIMEOUT_S + SLACK_S
