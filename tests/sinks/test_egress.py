"""An application's egress: shown by describe, checked before the application starts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sinks.conftest import query

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pageviews_to_postgres.py"


def fluvial(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluvial.cli", *args], cwd=REPO, capture_output=True, text=True,
        timeout=300, env={**os.environ, **env},
    )  # fmt: skip


def test_describe_lists_the_egress_after_the_topology() -> None:
    run = fluvial("describe", str(EXAMPLE), env={"PAGEVIEWS_DSN": "postgresql://u@127.0.0.1/db"})
    assert run.returncode == 0, run.stderr
    assert (
        "Egress: pageview-final-counts -> PostgreSQL table pageview_final_counts (upsert"
        in " ".join(run.stdout.split())
    )


@pytest.mark.kafka
def test_an_egress_that_cannot_run_stops_fluvial_run_before_the_application_starts(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    table = table_name("final")
    query(pg_dsn, f"CREATE TABLE {table} (key text PRIMARY KEY, value bigint)")  # no windows
    env = {
        "PAGEVIEWS_DSN": pg_dsn, "PAGEVIEWS_INPUT": topic_factory("views"),
        "PAGEVIEWS_OUTPUT": topic_factory("final"), "PAGEVIEWS_TABLE": table,
        "PAGEVIEWS_BOOTSTRAP": bootstrap_servers, "PAGEVIEWS_STATE_DIR": str(tmp_path),
    }  # fmt: skip
    run = fluvial("run", str(EXAMPLE), "--engine", "local", env=env)
    assert run.returncode == 1
    assert "lacks the column(s) ['window_start', 'window_end'" in " ".join(run.stderr.split())
    assert "task(s) on" not in run.stderr  # the application never started
