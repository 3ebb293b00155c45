"""``fluvial bench nexmark --kafka-streams-stream-time``: the app runs with Kafka Streams' stream
time across repartition topics, and its rows stay apart from the default mode's in the table."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from fluvial.bench.nexmark.bench import NexmarkFluvial, NexmarkSpec
from fluvial.bench.nexmark.table import row_cells, table_rows

APP = Path(__file__).parents[3] / "src" / "fluvial" / "bench" / "apps" / "nexmark_app.py"


def _spec(tmp_path: Path, *, catch_up: bool, cache: int) -> NexmarkSpec:
    return NexmarkSpec(
        workload="nexmark-q11", records=10, partitions=2, guarantee="at_least_once",
        commit_ms=100, bootstrap="127.0.0.1:9092", input_topic="in", output_topic="out",
        table_topic="", app_id="app", work_dir=tmp_path, cache_max_bytes=cache, query="q11",
        prefix="nx", catch_up_completeness=catch_up,
    )  # fmt: skip


@pytest.mark.parametrize("catch_up", [True, False])
def test_the_app_gets_the_mode_it_was_run_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, catch_up: bool
) -> None:
    _cmd, env = NexmarkFluvial().command(_spec(tmp_path, catch_up=catch_up, cache=0))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = runpy.run_path(str(APP))["config"]
    assert config.catch_up_completeness is catch_up


def test_kafka_streams_stream_time_rows_are_named_and_kept_apart(tmp_path: Path) -> None:
    system = NexmarkFluvial()
    runs = []
    for catch_up in (True, False):
        for cache in (0, 10 * 1024 * 1024):
            spec = _spec(tmp_path, catch_up=catch_up, cache=cache)
            runs.append({"system": system.label(spec), "query": "q11", "mode": "throughput",
                         "guarantee": spec.guarantee, "status": "ok", "cpu_us_per_record": 1.0,
                         "throughput_rps": 1.0, "config": system.config(spec)})  # fmt: skip
    assert [r["system"] for r in runs] == [
        "fluvial-local", "fluvial-local+cache", "fluvial-local+kstime", "fluvial-local+kstime+cache"
    ]  # fmt: skip
    assert runs[2]["config"]["catch_up_completeness"] is False
    labels = sorted((row_cells(row)[0], row.cache) for row in table_rows(runs))
    assert labels == [("q11", False), ("q11", True),
                      ("q11 (local+kstime)", False), ("q11 (local+kstime)", True)]  # fmt: skip
