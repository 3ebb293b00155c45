"""fluvial bench nexmark end to end on a tiny input: it proves the harness works, not any speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial.bench.nexmark.bench import run_nexmark_bench
from fluvial.bench.report import write_report

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


def test_q4_on_fluvial_and_kafka_streams_reports_sane_numbers(
    bootstrap_servers: str, reference_jar: Path, tmp_path: Path
) -> None:
    out = tmp_path / "nexmark.json"
    data = run_nexmark_bench(
        ["q4"], ["fluvial-local", "kafka-streams"], ["exactly_once_v2"], [0],
        events=3_000, partitions=3, commit_ms=100, bootstrap=bootstrap_servers, json_out=out,
        rate=100,
    )  # fmt: skip

    assert json.loads(out.read_text()) == data
    assert data["input"]["counts"] == {"person": 60, "auction": 180, "bid": 2_760}
    runs = {run["system"]: run for run in data["runs"]}
    assert set(runs) == {"fluvial-local", "kafka-streams"}
    for run in runs.values():
        assert run["status"] == "ok", (run.get("reason"), run.get("log_tail"))
        # q4 reads auctions and bids: every one of them was consumed and committed.
        assert run["input_committed"] == run["input_records"] == 2_940
        assert run["throughput_rps"] > 0 and run["cpu_us_per_record"] > 0
        assert run["flink_per_core_events_per_s"] == 34_000
    # Both systems wrote the same number of results (the closed auctions' categories).
    assert runs["fluvial-local"]["output_records"] == runs["kafka-streams"]["output_records"] > 0

    report = write_report([out], tmp_path / "report").read_text()
    assert "| q4 | exactly_once | off |" in report
    assert (tmp_path / "report" / "nexmark.png").exists()


def test_all_queries_run_alone_in_order_and_the_table_has_every_row(
    bootstrap_servers: str, reference_jar: Path, tmp_path: Path
) -> None:
    from fluvial.bench.nexmark.bench import DEFAULT_CACHE_BYTES

    lines: list[str] = []
    data = run_nexmark_bench(
        ["q0", "q1"], ["fluvial-local", "kafka-streams"], ["exactly_once_v2"],
        [DEFAULT_CACHE_BYTES, 0], events=2_000, partitions=3, commit_ms=100,
        bootstrap=bootstrap_servers, json_out=None, rate=100, say=lines.append,
    )  # fmt: skip

    runs = data["runs"]
    assert [(r["query"], r["system"]) for r in runs] == [
        (q, s) for q in ("q0", "q1")
        for s in ("fluvial-local+cache", "kafka-streams+cache", "fluvial-local", "kafka-streams")
    ]  # fmt: skip
    for run in runs:
        assert run["status"] == "ok", (run.get("reason"), run.get("log_tail"))
        assert run["input_committed"] == run["input_records"] == 1_840  # the bids
    # Each run alone: it began after the one before had stopped and its topics were deleted.
    for before, after in zip(runs, runs[1:], strict=False):
        assert before["finished_at"] <= after["started_at"]
    # Progress: which run of how many, which query, setting and system.
    started = [line for line in lines if line.startswith("[")]
    assert started[0] == "[1/8] q0 exactly_once_v2 cache on: fluvial-local+cache, 1,840 events"
    assert started[-1] == "[8/8] q1 exactly_once_v2 cache off: kafka-streams, 1,840 events"
    # The table: one row per query and cache setting, both systems' numbers and the ratios.
    table = data["table"]
    assert [(row["query"], row["cache"]) for row in table] == [
        ("q0", False), ("q0", True), ("q1", False), ("q1", True)
    ]  # fmt: skip
    by_system = {(r["query"], r["system"]): r for r in runs}
    for row in table:
        suffix = "+cache" if row["cache"] else ""
        ours = by_system[(row["query"], "fluvial-local" + suffix)]
        theirs = by_system[(row["query"], "kafka-streams" + suffix)]
        assert row["cpu_ratio"] == pytest.approx(
            ours["cpu_us_per_record"] / theirs["cpu_us_per_record"]
        )
        assert row["throughput_ratio"] == pytest.approx(
            ours["throughput_rps"] / theirs["throughput_rps"]
        )
        # Both wrote the same results: q0 and q1 write one result per bid.
        assert row["fluvial_output_records"] == row["kafka_streams_output_records"] == 1_840
        assert row["notes"] == []
    assert data["summary"]["with_cpu_ratio"] == 4
