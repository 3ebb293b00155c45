"""The exactly-once fault matrix.

Faults are injected for real while a seeded input flows into a three-broker cluster:

- ``kill-app``: ``kill -9`` of the ``fluvial run`` process (under Spark, of the driver with its
  JVM and Python workers), then a restart;
- ``zombie``: ``SIGSTOP`` of the app, a successor (a second driver) fences it, then
  ``SIGCONT``: the zombie must stop by itself (both engines);
- ``kill-broker``: ``kill -9`` of the leader of an input partition, then a restart;
- ``kill-spark-worker``: ``kill -9`` of the PySpark Python worker running a slot, so Spark
  retries the task and the new attempt fences the killed one (Spark engine).

Each fault kind is a scenario of its own (:mod:`fluvial.verify.scenario`): a fresh application
id and fresh topics on the same cluster, checked on its own by :mod:`fluvial.verify.check`, so
each row of the table counts only its own faults, records, duplicates and losses. A scenario
counts faults, not seconds: its input flows until every fault has been injected and recovered
from, whatever that takes, up to the scenario's timeout.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from fluvial.kafka.local import LocalKafka, free_port, port_is_free
from fluvial.verify.check import VerifyReport
from fluvial.verify.scenario import Scenario, default_timeout_s

DEFAULT_FAULTS = {
    "local": ("kill-app", "zombie", "kill-broker"),
    "spark": ("kill-spark-worker", "kill-app", "zombie"),
}
ENGINE_FAULTS = {
    "local": ("kill-app", "zombie", "kill-broker"),
    "spark": ("kill-spark-worker", "kill-app", "zombie", "kill-broker"),
}
# Spark runs: leases short enough that several fit between faults.
SPARK_LEASE_MS = 4000
TABLE_HEADER = ("fault", "injected", "records checked", "duplicates", "lost", "verdict")


@dataclass
class MatrixReport:
    seed: int
    guarantee: str
    engine: str
    commit_interval_ms: int
    fault_count: int
    duration_s: float
    records: int
    timeout_s: float = 0.0
    started: str = ""
    wall_s: float = 0.0
    scenarios: list[VerifyReport] = field(default_factory=list)
    verdict: str = "FAIL"

    def table_rows(self) -> list[tuple[str, ...]]:
        """One row per fault kind, each with its own numbers, then the overall verdict."""
        rows = [
            (s.fault, str(s.injected), str(s.records), str(s.duplicates), str(s.lost), s.verdict)
            for s in self.scenarios
        ]
        total = (
            "all",
            str(sum(s.injected for s in self.scenarios)),
            str(sum(s.records for s in self.scenarios)),
            str(sum(s.duplicates for s in self.scenarios)),
            str(sum(s.lost for s in self.scenarios)),
            self.verdict,
        )
        return [*rows, total]

    def summary(self) -> str:
        return "; ".join(s.summary() for s in self.scenarios) + f" => {self.verdict}"


def report_json(report: MatrixReport) -> str:
    return json.dumps(asdict(report), indent=2)


def _tagged(progress: Callable[[str], None], kind: str, message: str) -> None:
    """A scenario's progress line, tagged with its fault kind."""
    progress(f"[{kind}] {message}")


def run_matrix(
    *,
    seed: int = 1,
    guarantee: str = "exactly_once_v2",
    engine: str = "local",
    records: int = 6000,
    keys: int = 50,
    faults: tuple[str, ...] | None = None,
    fault_count: int = 3,
    commit_interval_ms: int = 500,
    duration_s: float = 30.0,
    timeout_s: float | None = None,
    spark_lease_ms: int = SPARK_LEASE_MS,
    bootstrap_servers: str | None = None,
    client_config: dict[str, str] | None = None,
    client_config_file: Path | None = None,
    cluster: LocalKafka | None = None,
    work_dir: Path | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> MatrixReport:
    """Run one scenario per fault kind, ``fault_count`` faults each.

    Each scenario's input is paced at ``records`` records per ``duration_s`` and flows for at
    least that long, then on until every fault has been injected and recovered from, then for a
    tail. A scenario fails only on what it checks, or when it is still waiting for a fault or
    a recovery after ``timeout_s`` (default: ``duration_s`` + 300 s + 120 s per fault).

    The scenarios share one three-broker cluster: ``cluster`` (a started :class:`LocalKafka`
    whose brokers may be killed), else a private one started here, or with
    ``bootstrap_servers`` someone else's cluster (then without ``kill-broker``), reached with
    ``client_config`` (librdkafka security settings); the apps read the same settings from
    ``client_config_file`` (or the environment they inherit, as ``fluvial run`` does).
    """
    if engine not in ENGINE_FAULTS:
        raise ValueError(f"unknown engine {engine!r}: use local or spark")
    faults = tuple(faults) if faults else DEFAULT_FAULTS[engine]
    unsupported = [f for f in faults if f not in ENGINE_FAULTS[engine]]
    if unsupported:
        raise ValueError(
            f"fault(s) {unsupported} do not apply to --engine {engine}: choose from "
            f"{', '.join(ENGINE_FAULTS[engine])}"
        )
    if client_config and bootstrap_servers is None and cluster is None:
        raise ValueError(
            "client settings are for an existing cluster: give its bootstrap servers "
            "(--bootstrap-servers, or bootstrap.servers in the settings file)"
        )
    if fault_count < 0 or records < 1 or duration_s <= 0:
        raise ValueError("fault_count must be >= 0, records >= 1 and duration_s > 0")
    if timeout_s is None:
        timeout_s = default_timeout_s(duration_s, fault_count)
    elif timeout_s <= duration_s:
        raise ValueError(
            f"timeout_s ({timeout_s:g}) must exceed duration_s ({duration_s:g}): the input "
            "alone flows for duration_s, then the faults and the catch-up need time too"
        )
    work = Path(work_dir or tempfile.mkdtemp(prefix="fluvial-verify-"))
    work.mkdir(parents=True, exist_ok=True)
    matrix = MatrixReport(seed, guarantee, engine, commit_interval_ms, fault_count, duration_s,
                          records, timeout_s,
                          started=datetime.now(UTC).isoformat(timespec="seconds"))  # fmt: skip
    began = time.monotonic()
    own_cluster = cluster is None and bootstrap_servers is None
    if cluster is not None:
        bootstrap_servers = cluster.bootstrap_servers
    elif bootstrap_servers is None:
        port = free_port()
        while not all(port_is_free(p) for p in (port + 1, port + 2)):
            port = free_port()
        cluster = LocalKafka(work / "kafka", port=port, brokers=3, heap="512m")
        progress("starting a three-broker Kafka")
        bootstrap_servers = cluster.start()
    elif "kill-broker" in faults:
        faults = tuple(f for f in faults if f != "kill-broker")  # not ours to kill
    try:
        for kind in faults:
            scenario = Scenario(
                kind, cluster=cluster, bootstrap=bootstrap_servers, seed=seed,
                guarantee=guarantee, engine=engine, records=records, keys=keys,
                fault_count=fault_count, commit_interval_ms=commit_interval_ms,
                duration_s=duration_s, timeout_s=timeout_s, spark_lease_ms=spark_lease_ms, work=work / kind,
                client_config=client_config, client_config_file=client_config_file,
                progress=partial(_tagged, progress, kind),
            )  # fmt: skip
            matrix.scenarios.append(scenario.run())
    finally:
        if own_cluster and cluster is not None:
            cluster.stop()
    clean = bool(matrix.scenarios) and all(s.verdict == "PASS" for s in matrix.scenarios)
    matrix.verdict = "PASS" if clean else "FAIL"
    matrix.wall_s = round(time.monotonic() - began, 1)
    return matrix
