"""``fluvial verify`` and ``fluvial bench`` against the secured cluster, with client settings
from a file or the environment, as ``fluvial run`` and ``fluvial reset`` take them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.security.conftest import SecureCluster
from tests.security.test_secured_cluster import assert_no_secrets

# verify and bench each start an application and its checks; under load one test took 578 s.
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(1500)]


def cli(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FLUVIAL_KAFKA_CLIENT")}
    return subprocess.run(
        [sys.executable, "-m", "fluvial.cli", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_verify_runs_the_fault_matrix_on_the_secured_cluster(
    secure_cluster: SecureCluster, tmp_path: Path, command_lines: set[str]
) -> None:
    cluster = secure_cluster
    report = tmp_path / "verify.json"
    # The settings file names the cluster; the password comes from the environment.
    settings = cluster.properties_file("admin")
    lines = [
        line for line in settings.read_text().splitlines() if not line.startswith("sasl.password")
    ]
    settings.write_text("\n".join(lines) + "\n")
    password = cluster.credentials.passwords["admin"]
    run = cli(
        "verify", "--faults", "kill-app", "--fault-count", "1", "--records", "300",
        "--duration-s", "8", "--commit-interval-ms", "300", "--client-config", str(settings),
        "--json", str(report), env={"FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": password},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(report.read_text())
    [scenario] = result["scenarios"]
    assert scenario["verdict"] == "PASS" and scenario["injected"] == 1, scenario
    assert "-> PASS" in run.stdout
    assert_no_secrets(
        cluster,
        {"verify": run.stdout + run.stderr, "report": report.read_text(),
         "command lines": "\n".join(sorted(command_lines))},
    )  # fmt: skip


def test_bench_runs_fluvial_on_the_secured_cluster_and_refuses_peers(
    secure_cluster: SecureCluster, tmp_path: Path, command_lines: set[str]
) -> None:
    cluster = secure_cluster
    results = tmp_path / "bench.json"
    run = cli(
        "bench", "figure2", "--records", "3000", "--peers", "kafka-streams",
        "--json", str(results), env={"FLUVIAL_KAFKA_CLIENT_CONFIG": str(cluster.properties_file("admin"))},
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    runs = {r["system"]: r for r in json.loads(results.read_text())["runs"]}
    fluvial = runs["fluvial-local"]
    assert fluvial["status"] == "ok", fluvial
    assert fluvial["input_committed"] == fluvial["input_records"] == 3000
    assert fluvial["output_records"] > 0
    peer = runs["kafka-streams"]
    assert peer["status"] == "skipped" and "plain clusters" in peer["reason"], peer
    assert_no_secrets(
        cluster,
        {"bench": run.stdout + run.stderr, "results": results.read_text(),
         "command lines": "\n".join(sorted(command_lines))},
    )  # fmt: skip


def settings_without_password(cluster: SecureCluster) -> tuple[Path, dict[str, str]]:
    """A settings file naming the cluster, and the environment that holds its password."""
    settings = cluster.properties_file("admin")
    lines = [
        line for line in settings.read_text().splitlines() if not line.startswith("sasl.password")
    ]
    settings.write_text("\n".join(lines) + "\n")
    return settings, {"FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": cluster.credentials.passwords["admin"]}


def test_bench_postgres_sink_runs_on_the_secured_cluster(
    secure_cluster: SecureCluster, tmp_path: Path, command_lines: set[str]
) -> None:
    cluster = secure_cluster
    results = tmp_path / "postgres-sink.json"
    settings, env = settings_without_password(cluster)
    run = cli(
        "bench", "postgres-sink", "--records", "3000", "--batch", "1000",
        "--writers", "copy,fluvial", "--client-config", str(settings), "--json", str(results),
        env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    runs = {r["writer"]: r for r in json.loads(results.read_text())["runs"]}
    assert runs["copy"]["rows"] == runs["fluvial"]["rows"] == 3000, runs
    assert runs["fluvial"]["records"] == 3000
    assert_no_secrets(
        cluster,
        {"bench": run.stdout + run.stderr, "results": results.read_text(),
         "command lines": "\n".join(sorted(command_lines))},
    )  # fmt: skip


def test_bench_queries_runs_on_the_secured_cluster(
    secure_cluster: SecureCluster, tmp_path: Path, command_lines: set[str]
) -> None:
    cluster = secure_cluster
    results = tmp_path / "queries.json"
    settings, env = settings_without_password(cluster)
    run = cli(
        "bench", "queries", "--records", "3000", "--clients", "1", "--client-config",
        str(settings), "--json", str(results), env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(results.read_text())
    # Both runs of the application processed every record on the secured cluster (a run that
    # cannot connect never gets there, and the bench fails). How many queries a client got in
    # before the end depends on the machine's load, so only their answers are checked.
    # The application runs alone, then once per way of answering queries (in the application's
    # own process, and from the reader process beside it).
    loaded = result["with_queries"]
    assert set(loaded) == {"in-process", "reader"}, result
    for phase in (result["without_queries"], *loaded.values()):
        assert phase["records"] == 3000 and phase["processing_rps"] > 0, result
    for mode, phase in loaded.items():
        assert set(phase["statuses"]) <= {"200"}, (mode, result)
    assert_no_secrets(
        cluster,
        {"bench": run.stdout + run.stderr, "results": results.read_text(),
         "command lines": "\n".join(sorted(command_lines))},
    )  # fmt: skip


def test_verify_and_bench_fail_fast_on_a_wrong_password(
    secure_cluster: SecureCluster, tmp_path: Path
) -> None:
    cluster = secure_cluster
    wrong = "not-" + cluster.credentials.passwords["admin"]
    cluster.credentials.passwords["admin-wrong"] = wrong  # scanned for too
    settings = cluster.properties_file("admin", wrong)
    for args in (
        ["verify", "--faults", "kill-app", "--client-config", str(settings)],
        ["bench", "figure2", "--records", "100", "--client-config", str(settings)],
        ["bench", "postgres-sink", "--records", "100", "--client-config", str(settings)],
        ["bench", "queries", "--records", "100", "--client-config", str(settings)],
    ):
        started = time.monotonic()
        run = cli(*args, env={}, timeout=120)
        assert time.monotonic() - started < 60
        assert run.returncode == 1, run.stdout + run.stderr
        assert "authentication failed" in run.stderr and "sasl.password" in run.stderr
        assert_no_secrets(cluster, {" ".join(args[:2]): run.stdout + run.stderr})
