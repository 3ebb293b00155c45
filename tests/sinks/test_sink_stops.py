"""``fluvial sink postgres`` stopped by SIGTERM at any moment exits cleanly: with a message
and an exit code, never killed by the signal, and what it wrote is whole."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.runtime.harness import wait_until
from tests.sinks.conftest import query
from tests.sinks.harness import SinkProcess
from tests.sinks.test_postgres_sink import BASE, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


# Moments from the start of the process: its imports, the checks before the sink claims its
# partitions, and its running loop (-1: once it says it runs). Not earlier: before the
# interpreter reaches fluvial's first import (0.3 s was too soon on a machine loaded 5-fold),
# no Python code can handle a signal.
@pytest.mark.parametrize("delay_s", [1.0, 2.0, 3.0, -1])
def test_sigterm_at_any_moment_exits_cleanly(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path,
    delay_s: float,
) -> None:  # fmt: skip
    topic = topic_factory("views")
    produce(bootstrap_servers, topic, [(b"k%d" % i, b"v", BASE + i) for i in range(50)])
    sink = SinkProcess(
        pg_dsn, table_name("stop"),
        ["--topic", topic, "--table", table_name("stop"), "--bootstrap-servers",
         bootstrap_servers, "--quiet"],
        tmp_path,
    )  # fmt: skip
    sink.start()
    try:
        if delay_s < 0:
            sink.wait_ready()
        else:
            time.sleep(delay_s)  # the moment is the point of the test, not a wait
        sink.signal(signal.SIGTERM)
        code = sink.proc.wait(60)
    finally:
        sink.stop()
    output = sink.output()
    assert code in (0, 128 + signal.SIGTERM), f"exit {code}:\n{output}"
    assert "stopped" in output, output
    assert "Traceback" not in output, output


def copy_waiting_for_the_client(dsn: str, sink_id: str) -> list[int]:
    """Backend pids of the sink's sessions inside a COPY that waits for data from the sink."""
    rows = query(
        dsn,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND state = 'active' "
        "AND wait_event = 'ClientRead' AND query LIKE 'COPY%%'",
        [f"fluvial-sink:{sink_id}"[:63]],
    )
    return [pid for (pid,) in rows]


def test_a_sink_paused_in_the_middle_of_a_copy_has_its_transaction_ended_by_the_server(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    """Its row locks on the offsets table go within transaction_timeout_ms, without waiting
    for a successor; resumed, it says why its connection went and writes every record once."""
    topic = topic_factory("views")
    table = table_name("paused")
    count = 30_000
    padding = b"x" * 400  # rows big enough that a batch's COPY takes a while to send
    produce(bootstrap_servers, topic, [(b"k", b"%d-" % i + padding, BASE) for i in range(count)])
    timeout_ms = 3000
    sink = SinkProcess(
        pg_dsn, table,
        ["--topic", topic, "--table", table, "--bootstrap-servers", bootstrap_servers,
         "--max-batch-records", "3000", "--commit-interval-ms", "100",
         "--transaction-timeout-ms", str(timeout_ms), "--quiet"],
        tmp_path,
    )  # fmt: skip
    sink.start()
    try:
        sink.wait_ready()
        paused: list[int] = []

        def paused_mid_copy() -> bool:
            if not wait_until(lambda: copy_waiting_for_the_client(pg_dsn, table) or "none", 60,
                              "a COPY", interval_s=0.002):  # fmt: skip
                return False
            sink.signal(signal.SIGSTOP)
            time.sleep(0.2)  # whatever the server had in hand is read meanwhile
            pids = copy_waiting_for_the_client(pg_dsn, table)
            if pids:
                paused.extend(pids)
                return True
            sink.signal(signal.SIGCONT)
            return False

        wait_until(paused_mid_copy, 120, "the sink paused in the middle of a COPY", interval_s=0)
        since = time.monotonic()
        wait_until(
            lambda: not query(pg_dsn, "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)",
                              [paused]),
            30, "the server to end the paused sink's session",
        )  # fmt: skip
        assert time.monotonic() - since < timeout_ms / 1000 + 3
        sink.signal(signal.SIGCONT)
        wait_until(lambda: query(pg_dsn, f"SELECT count(*) FROM {table}")[0][0] >= count, 120,
                   "the resumed sink to write everything")  # fmt: skip
        assert sink.stop() == 0, sink.output()
    finally:
        sink.stop()
    output = sink.output()
    assert "transaction_timeout_ms" in output and "paused" in output, output
    assert query(pg_dsn, f"SELECT count(*), count(DISTINCT value) FROM {table}") == [(count, count)]
