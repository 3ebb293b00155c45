"""The bench harness end to end on a tiny input: it proves the harness works, not any speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial.bench.cli import run_bench
from fluvial.bench.report import write_report

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def test_figure2_on_the_local_engine_reports_sane_numbers(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    data = run_bench(
        ["figure2"], ["fluvial-local"], ["exactly_once_v2"], [100],
        records=2_000, partitions=2, bootstrap=bootstrap_servers, json_out=out,
    )  # fmt: skip

    assert json.loads(out.read_text()) == data
    [run] = data["runs"]
    assert run["status"] == "ok", run.get("reason")
    assert run["throughput_rps"] > 0
    # Every produced input record was consumed and committed.
    assert run["input_committed"] == run["input_records"] == 2_000
    # Caching off: one revision per accepted record, and three quarters of the views are long
    # enough to count; some may be late across partitions, never more than that.
    assert 0 < run["output_records"] <= 2_000
    assert run["cpu_s_per_million"] > 0
    assert run["peak_rss_mb"] > 0
    assert data["environment"]["versions"]["kafka"]


def test_passthrough_latency_mode_measures_results(bootstrap_servers: str, tmp_path: Path) -> None:
    data = run_bench(
        ["passthrough"], ["fluvial-local"], ["at_least_once"], [100],
        records=0, partitions=1, bootstrap=bootstrap_servers, json_out=None,
        rate=200, seconds=2,
    )  # fmt: skip

    [run] = data["runs"]
    assert run["status"] == "ok", run.get("reason")
    assert run["results_measured"] > 0
    assert 0 < run["latency_p50_ms"] <= run["latency_p99_ms"] <= run["latency_max_ms"]


def test_startup_bench_times_the_first_committed_output_on_spark(bootstrap_servers: str) -> None:
    from fluvial.bench.startup import run_startup_bench

    lines: list[str] = []
    data = run_startup_bench(
        runs=1, engine="spark", master="local[2]", records=50, guarantee="exactly_once_v2",
        bootstrap=bootstrap_servers, extra_args=[], say=lines.append,
    )  # fmt: skip

    [run] = data["systems"]["fluvial"]["results"]
    phases = run["phases"]
    # Every phase was seen, in the order they happen, and the first output ended them. (The
    # lease begins as the tasks line is printed: either may come first.)
    assert set(phases) == {"loaded", "session", "lease", "task", "slot", "output"}
    order = [phases[k] for k in ("loaded", "session", "task", "slot", "output")]
    assert order == sorted(order)
    assert phases["loaded"] < phases["lease"] < phases["task"]
    assert phases["output"] == run["first_output_s"] > phases["loaded"] > 0
    assert 0 < run["stop_s"] < 60
    # The CPU seconds of fluvial run's processes by each phase's end only grow; Spark's
    # session (its JVM) uses some.
    cpu = run["cpu_s"]
    assert set(cpu) == set(phases)
    assert 0 < cpu["loaded"] < cpu["session"] <= cpu["task"] <= cpu["output"]
    assert data["systems"]["fluvial"]["summary"]["cpu_s"]["total"]["median"] == cpu["output"]
    assert any(line.startswith("first committed output") for line in lines)
    assert (
        data["systems"]["fluvial"]["summary"]["first_output_s"]["median"] == run["first_output_s"]
    )


def test_report_writes_markdown_for_a_results_file(tmp_path: Path) -> None:
    results = tmp_path / "r.json"
    env = {
        "date": "2026-01-01 00:00 UTC",
        "machine": {"cpu": "test", "cores": 2, "memory_gib": 24.0, "os": "Linux"},
        "versions": {"fluvial": "0.1.0", "python": "3.11", "kafka": "4.3.1", "librdkafka": "2"},
    }
    run = {
        "workload": "figure2", "mode": "throughput", "guarantee": "exactly_once_v2",
        "commit_interval_ms": 100, "records": 10, "partitions": 1, "version": "",
        "config": {"x": 1}, "status": "ok", "throughput_rps": 1000.0, "seconds": 0.01,
        "startup_s": 1.0, "cpu_s_per_million": 5.0, "peak_rss_mb": 50.0, "output_records": 10,
    }  # fmt: skip
    runs = [{**run, "system": "fluvial-local"}, {**run, "system": "quix", "throughput_rps": 250.0}]
    results.write_text(json.dumps({"environment": env, "command": "", "runs": runs}))

    report = write_report([results], tmp_path / "report")

    text = report.read_text()
    assert "| fluvial-local | figure2 |" in text
    assert "4.00x" in text  # fluvial / Quix, and the >= 3x target met
    assert (tmp_path / "report" / "throughput.png").stat().st_size > 0


def test_report_keeps_earlier_runs_in_its_history_and_judges_the_cached_run(
    tmp_path: Path,
) -> None:
    env = {
        "machine": {"cpu": "test", "cores": 2, "memory_gib": 24.0, "os": "Linux"},
        "versions": {"fluvial": "0.1.0", "python": "3.11", "kafka": "4.3.1", "librdkafka": "2"},
    }
    run = {
        "workload": "figure2", "mode": "throughput", "guarantee": "exactly_once_v2",
        "commit_interval_ms": 100, "records": 10, "partitions": 1, "version": "",
        "config": {"x": 1}, "status": "ok", "throughput_rps": 1000.0, "seconds": 0.01,
        "startup_s": 1.0, "cpu_s_per_million": 5.0, "cpu_us_per_record": 5.0,
        "peak_rss_mb": 50.0, "output_records": 10, "load_average": [3.5, 3.0, 2.0],
        "load_average_end": [4.25, 3.0, 2.0],
    }  # fmt: skip
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    first.write_text(json.dumps({"environment": {**env, "date": "2026-01-01 00:00 UTC"},
                                 "runs": [{**run, "system": "fluvial-local"},
                                          {**run, "system": "quix", "throughput_rps": 900.0}]}))  # fmt: skip
    second.write_text(json.dumps({"environment": {**env, "date": "2026-02-01 00:00 UTC"},
                                  "runs": [{**run, "system": "fluvial-local+cache"},
                                           {**run, "system": "quix", "throughput_rps": 100.0}]}))  # fmt: skip
    history = tmp_path / "history.json"

    write_report([first], tmp_path / "report", history)
    text = write_report([second], tmp_path / "report", history).read_text()
    write_report([second], tmp_path / "report", history)  # a file already kept is kept once

    assert (
        "| figure2 EOS 100 ms, fluvial's record cache on: fluvial >= 5x Quix Streams | 10.00x | met |"
        in text
    )
    assert "| 3.5 → 4.2 |" in text  # the load beside the run, at its start and its end
    kept = json.loads(history.read_text())["entries"]
    assert [e["date"] for e in kept] == ["2026-01-01 00:00 UTC", "2026-02-01 00:00 UTC"]
    assert (
        "| 2026-01-01 00:00 UTC |  | quix | figure2 | exactly_once_v2 | 100 ms | 10 | 900 |" in text
    )
