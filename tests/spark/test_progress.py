"""``fluvial run`` on Spark as its user sees it: the lag before the first lease, progress while
a long lease runs, the Spark UI's link, and a SIGTERM that ends the lease on a commit at once."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    scrape,
    wait_until,
)

from fluvial.kafka import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]


def test_progress_reaches_the_driver_while_a_long_lease_runs_and_sigterm_stops_within_5_s(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    views = generate_views(seed=29, count=400)
    oracle, _ = oracle_counts(views)
    input_topic, output_topic = topic_factory("views"), topic_factory("counts")
    produce(bootstrap_servers, input_topic, views)
    port = free_port()
    # One lease would last 10 minutes: everything below happens inside the first one.
    runner = SparkRunner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                         tmp_path / "state", lease_ms=600_000)  # fmt: skip
    runner.start(prometheus_port=port)

    def until(condition, timeout_s: float, what: str, interval_s: float = 0.5) -> None:  # noqa: ANN001
        try:
            wait_until(condition, timeout_s, what, interval_s=interval_s)
        except AssertionError as error:
            raise AssertionError(f"{error}; fluvial run:\n{runner.output()[-3000:]}") from None

    try:
        # Before any slot has measured anything, the lag read from the broker shows the
        # records waiting (not 0).
        until(lambda: scrape(port).get("fluvial_worker_lag") == len(views), 300,
                   "the waiting records to show as lag", interval_s=0.05)  # fmt: skip
        # Records and commits reach the driver while the lease still runs.
        # (The count goes on past the input with the repartition topic's records.)
        until(lambda: scrape(port).get("fluvial_worker_records_in_total", 0) >= len(views),
                   120, "every record to show as read")  # fmt: skip
        until(lambda: dict(read_revisions(bootstrap_servers, output_topic)) == oracle, 120,
                   "the committed output to reach the oracle")  # fmt: skip
        metrics = scrape(port)
        assert metrics["fluvial_worker_commits_total"] > 0
        # The slots' own lag replaced the broker's (it counts the repartition topic's commit
        # markers too, so it need not reach 0).
        assert metrics["fluvial_worker_lag"] < len(views)
        assert runner.leases() == [], "the first lease ended: these numbers were not live"
        assert "UI http://127.0.0.1:" in runner.output(), runner.output()[-2000:]

        stopping, signalled = time.monotonic(), time.time()
        runner.signal(signal.SIGTERM)
        assert runner.wait(60) == 0, runner.output()[-3000:]
        took = time.monotonic() - stopping
        # The lease, 10 minutes long, ended on its commit within 5 s of the signal; the
        # process (Spark's JVM stopped with it) soon after, with room for a loaded machine.
        [lease] = runner.leases()
        assert lease["t"] - signalled < 5, f"the lease ended {lease['t'] - signalled:.1f} s late"
        assert took < 10, f"SIGTERM took {took:.1f} s to stop: {runner.output()[-2000:]}"
        check_revisions_exactly_once(read_revisions(bootstrap_servers, output_topic), oracle)
    finally:
        if runner.proc is not None and runner.proc.poll() is None:
            runner.kill9()
