"""``fluvial kafka status --port P`` without ``--data-dir`` finds the cluster, or says none runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests import processes

from fluvial.kafka import LocalKafka, free_port

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def status(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "FLUVIAL_HOME": str(home)}
    return processes.run([sys.executable, "-m", "fluvial.cli", "kafka", "status", *args],
                         timeout=60, env=env)  # fmt: skip


def test_status_by_port_finds_a_cluster_started_elsewhere(
    kafka_cluster: LocalKafka, tmp_path: Path
) -> None:
    # The session's cluster lives in a temporary directory, not under FLUVIAL_HOME.
    result = status("--port", str(kafka_cluster.port), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "serving" in result.stdout and str(kafka_cluster.data_dir) in result.stdout


def test_status_of_a_port_nobody_serves_says_none_runs(tmp_path: Path) -> None:
    port = free_port()
    result = status("--port", str(port), home=tmp_path)
    assert result.returncode == 1
    assert f"no local cluster on port {port}" in result.stderr
    assert "serving" not in result.stdout

    missing = tmp_path / "no-such-dir"
    result = status("--port", str(port), "--data-dir", str(missing), home=tmp_path)
    assert result.returncode == 1 and f"no local cluster in {missing}" in result.stderr
    assert not missing.exists()
