"""A real Spark standalone cluster on this machine: a master and two workers, from the pyspark
install, bound to 127.0.0.1, stopped with whatever they started however the test ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyspark
from tests import processes
from tests.runtime.harness import wait_until

from fluvial.jvm import java_executable
from fluvial.kafka import free_port

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
WORKERS = ("worker-a", "worker-b")


@dataclass
class StandaloneCluster:
    master_url: str
    master: subprocess.Popen[bytes]
    workers: dict[str, subprocess.Popen[bytes]]
    state_dirs: dict[str, Path]
    work_dirs: dict[str, Path]


@contextlib.contextmanager
def standalone_cluster(
    directory: Path,
    *,
    env: dict[str, str] | None = None,
    worker_env: dict[str, str] | None = None,
    worker_memory: str = "1g",
) -> Iterator[StandaloneCluster]:
    """Start the cluster in ``directory`` (logs, work and state dirs); stop it on exit.

    ``env`` replaces the environment the daemons (and so the executors) inherit, by default
    this process's; ``worker_env`` adds to the workers' own.
    """
    java = java_executable()
    directory.mkdir(parents=True, exist_ok=True)
    base = {
        **(os.environ if env is None else env),
        "JAVA_HOME": os.path.dirname(os.path.dirname(os.path.realpath(java))),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(directory / "logs"),
    }
    port = free_port()
    master_url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, args: list[str], extra: dict[str, str]) -> subprocess.Popen[bytes]:
        with open(directory / f"{name}.log", "wb") as log:
            proc = processes.spawn([SPARK_CLASS, *args], env={**base, **extra}, stdout=log,
                                   stderr=subprocess.STDOUT, what=f"Spark {name}")  # fmt: skip
        procs.append(proc)
        return proc

    try:
        master = launch("master", ["org.apache.spark.deploy.master.Master", "--host",
                                   "127.0.0.1", "--port", str(port), "--webui-port",
                                   str(free_port())], {})  # fmt: skip
        workers, state_dirs, work_dirs = {}, {}, {}
        for name in WORKERS:
            state_dirs[name] = directory / name / "state"
            work_dirs[name] = directory / name / "work"
            workers[name] = launch(
                name,
                [
                    "org.apache.spark.deploy.worker.Worker",
                    master_url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    worker_memory,
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work_dirs[name]),
                ],  # fmt: skip
                # Executors inherit the worker's environment: each worker, its own state dir.
                {"FLUVIAL_EXECUTOR_STATE_DIR": str(state_dirs[name]), **(worker_env or {})},
            )
        wait_until(
            lambda: (directory / "master.log").read_text().count("Registering worker") >= 2,
            180,
            "two workers to register with the master",
        )
        yield StandaloneCluster(master_url, master, workers, state_dirs, work_dirs)
    finally:
        for proc in reversed(procs):  # workers (and their executors) first, then the master
            processes.stop(proc)
