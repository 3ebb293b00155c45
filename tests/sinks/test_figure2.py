"""Figure 2 end to end into PostgreSQL under exactly_once_v2, with kill -9 of the application
and of the sink: the table equals the oracle, window by window."""

from __future__ import annotations

import random
import signal
import time
from pathlib import Path

import pytest

from tests.event_times import event_time_base_ms
from tests.runtime.harness import (
    GRACE_MS,
    WINDOW_MS,
    PageView,
    Runner,
    SparkRunner,
    generate_views,
    oracle_counts,
    produce,
    wait_until,
)
from tests.sinks.conftest import query
from tests.sinks.harness import SinkProcess

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pageviews_to_postgres.py"


def table_windows(dsn: str, table: str) -> dict[tuple[str, int], int]:
    rows = query(
        dsn,
        f"SELECT key, (extract(epoch FROM window_start) * 1000)::bigint, "
        f"(extract(epoch FROM window_end) * 1000)::bigint, value FROM {table}",
    )
    for _key, start, end, _value in rows:
        assert end - start == WINDOW_MS
    return {(key, start): value for key, start, _end, value in rows}


def test_figure2_into_postgres_with_the_app_and_the_sink_killed(
    bootstrap_servers: str, pg_dsn: str, topic_factory, unique_name, table_name, tmp_path: Path
) -> None:
    rng = random.Random(17)
    views = generate_views(seed=17, count=3000, start_ms=event_time_base_ms())
    oracle, dropped = oracle_counts(views)
    assert dropped > 0
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("counts")
    table = table_name("counts")
    app = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                 tmp_path / "state", commit_ms=300)  # fmt: skip
    sink = SinkProcess(pg_dsn, table, ["--topic", output_topic, "--table", table,
                                       "--mode", "upsert", "--value-serde", "long",
                                       "--window-size-ms", str(WINDOW_MS),
                                       "--bootstrap-servers", bootstrap_servers,
                                       "--commit-interval-ms", "200"], tmp_path / "sink")  # fmt: skip
    app.start()
    sink.start()
    try:
        sink.wait_ready()
        for n, start in enumerate(range(0, len(views), 250)):
            produce(bootstrap_servers, input_topic, views[start : start + 250])
            time.sleep(rng.uniform(0.3, 1.5))  # where the kill lands is left to chance
            victims = ["app", "sink", "both"][n % 3]
            if victims in ("app", "both"):
                app.kill9()
                assert app.proc.returncode == -signal.SIGKILL, (
                    f"the app had exited:\n{app.output()}"
                )
                app.start()
            if victims in ("sink", "both"):
                sink.kill9()  # it checks that the sink was still running
                sink.start()
            sink.wait_ready()
        wait_until(lambda: table_windows(pg_dsn, table) == oracle, 240,
                   "the table to equal the oracle")  # fmt: skip
        assert app.stop() == 0, app.output()
        assert sink.stop() == 0, sink.output()
    finally:
        app.stop()
        sink.stop()
    assert table_windows(pg_dsn, table) == oracle


def suppressed_oracle(views: list[PageView]) -> dict[tuple[str, int], int]:
    """The final counts that suppress(until_window_closes) emits: windows whose end plus
    grace the aggregation's stream time (the largest timestamp of a long view) has passed."""
    counts, _dropped = oracle_counts(views)
    stream_time = max(v.timestamp_ms for v in views if v.period >= 30000)
    return {w: c for w, c in counts.items() if w[1] + WINDOW_MS + GRACE_MS <= stream_time}


def test_the_example_lands_final_counts_through_its_egress_despite_kill_9(
    bootstrap_servers: str, pg_dsn: str, topic_factory, unique_name, table_name, tmp_path: Path
) -> None:
    rng = random.Random(5)
    views = generate_views(seed=5, count=2000, start_ms=event_time_base_ms())
    # A last long view a minute later closes every window before it.
    closer = PageView("user-0", "news", 60_000, views[-1].timestamp_ms + 60_000)
    oracle = suppressed_oracle([*views, closer])
    assert len(oracle) > 20
    input_topic, output_topic = topic_factory("pageviews"), topic_factory("final")
    table = table_name("final")
    app_id = unique_name("app")
    app = SparkRunner(
        bootstrap_servers, app_id, input_topic, output_topic, tmp_path / "state",
        engine="local", app=EXAMPLE,
        extra_env={"PAGEVIEWS_DSN": pg_dsn, "PAGEVIEWS_INPUT": input_topic,
                   "PAGEVIEWS_OUTPUT": output_topic, "PAGEVIEWS_TABLE": table,
                   "PAGEVIEWS_APP_ID": app_id, "PAGEVIEWS_BOOTSTRAP": bootstrap_servers,
                   "PAGEVIEWS_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    app.start()
    try:
        app.wait_ready()
        assert f"egress: {output_topic} -> PostgreSQL table {table}" in app.output()
        for start in range(0, len(views), 250):
            produce(bootstrap_servers, input_topic, views[start : start + 250])
            time.sleep(rng.uniform(0.5, 2.0))  # where the kill lands is left to chance
            app.kill9()  # the application and its sink, mid-flight
            assert app.proc.returncode == -signal.SIGKILL, f"the app had exited:\n{app.output()}"
            app.start()
            app.wait_ready()
        produce(bootstrap_servers, input_topic, [closer])
        wait_until(lambda: table_windows(pg_dsn, table) == oracle, 240,
                   "the table to hold every final count")  # fmt: skip
        assert app.stop() == 0, app.output()
        assert f"egress: {table} stopped." in app.output()
    finally:
        app.stop()
    assert table_windows(pg_dsn, table) == oracle
