"""``spark-submit`` starts fluvial's driver, shipping the packed environment with ``--archives``
(docs/production.md), to a standalone cluster whose workers lack fluvial."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyspark
import pytest
from tests.runtime.harness import (
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    wait_until,
)
from tests.spark.standalone import standalone_cluster
from tests.spark.test_packed_cluster import bare_python, without_this_environment

import fluvial.cli
from fluvial.spark.pack import ENV_NAME

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

SPARK_SUBMIT = Path(pyspark.__file__).parent / "bin" / "spark-submit"


@dataclass
class SubmitRunner(SparkRunner):
    """The driver as ``spark-submit … fluvial/cli.py run APP.py`` in client mode."""

    archive: Path | None = None

    def start(self, *, prometheus_port: int | None = None) -> None:
        cmd = [
            str(SPARK_SUBMIT), "--master", self.master, "--deploy-mode", "client",
            "--archives", f"{self.archive}#{ENV_NAME}",
            "--conf", f"spark.executorEnv.PYSPARK_PYTHON=./{ENV_NAME}/bin/python",
            "--conf", "spark.executor.memory=512m",
            fluvial.cli.__file__, "run", str(self.app), "--engine", "spark",
            "--master", self.master, "--no-pack",
        ]  # fmt: skip
        env = {
            "FLUVIAL_SPARK_LEASE_MS": str(self.lease_ms),
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "PYSPARK_PYTHON": f"./{ENV_NAME}/bin/python",
        }
        self._launch(cmd, env, prometheus_port)

    def driver_pid(self) -> int:
        """fluvial's Python driver: the child that ``spark-submit`` started for ``cli.py``."""
        assert self.proc is not None
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.proc.pid and fluvial.cli.__file__ in cmdline:
                return int(entry.name)
        raise AssertionError("spark-submit has no fluvial driver child")

    def stop(self, timeout_s: float = 60) -> int:
        """SIGTERM to the Python driver, which commits and stops; spark-submit exits with it."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.wait_ready()
        os.kill(self.driver_pid(), signal.SIGTERM)
        return self.wait(timeout_s)


def test_spark_submit_ships_the_packed_environment(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    bare = bare_python(tmp_path / "bare-python")
    env = without_this_environment(bare)
    packed = subprocess.run(
        [sys.executable, "-m", "fluvial.cli", "pack"], capture_output=True, text=True, timeout=300
    )
    assert packed.returncode == 0, packed.stderr
    views = generate_views(seed=19, count=1800)
    oracle, _dropped = oracle_counts(views)
    with standalone_cluster(
        tmp_path / "cluster", env=env, worker_env={"SPARK_DAEMON_MEMORY": "256m"},
        worker_memory="768m",
    ) as cluster:  # fmt: skip
        runner = SubmitRunner(
            bootstrap_servers, unique_name("submit"), topic_factory("pageviews"),
            topic_factory("counts"), tmp_path / "driver", commit_ms=300,
            master=cluster.master_url, archive=Path(packed.stdout.strip()),
        )  # fmt: skip
        runner.start()
        try:
            runner.wait_ready(180)
            produce(bootstrap_servers, runner.input_topic, views)
            wait_until(
                lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                240,
                "the committed output to reach the oracle's final counts",
            )
        finally:
            code = runner.stop()
        assert code == 0, runner.output()[-5000:]
        check_revisions_exactly_once(read_revisions(bootstrap_servers, runner.output_topic), oracle)
        pythons = {s["python"] for e in runner.leases() if "slots" in e for s in e["slots"]}
        assert pythons, runner.output()[-3000:]
        work_dirs = tuple(str(d) for d in cluster.work_dirs.values())
        for python in pythons:
            assert f"/{ENV_NAME}/bin/python" in python and python.startswith(work_dirs), python
