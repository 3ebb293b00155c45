"""``fluvial sink postgres`` stopped by SIGTERM at any moment exits cleanly: with a message
and an exit code, never killed by the signal, and what it wrote is whole."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.sinks.harness import SinkProcess
from tests.sinks.test_postgres_sink import BASE, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


# Moments from the start of the process: its interpreter and imports, the checks before the
# sink claims its partitions, and its running loop (-1: once it says it runs).
@pytest.mark.parametrize("delay_s", [0.3, 1.0, 2.0, 3.0, -1])
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
