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
