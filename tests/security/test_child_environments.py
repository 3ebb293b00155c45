"""No secret in the environment of any process fluvial starts, short-lived ones included.

Every spawn goes through :mod:`fluvial.children` (checked on the source), and the real children
are observed: ``JAVA_HOME`` and ``PYSPARK_PYTHON`` point at wrappers that record the environment
they were started with and then run the real program, so ``java -version``, ``keytool``, the
storage-format JVM, the brokers, Spark's JVMs and Python workers are all seen however briefly
they live; the long-lived children (the query reader, Spark's JVM) are read from ``/proc`` too.
"""

from __future__ import annotations

import ast
import os
import secrets
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import fluvial
from fluvial import children
from fluvial.iq.server import TOKEN_ENV
from fluvial.kafka import free_port
from fluvial.kafka.security import write_client_properties
from tests.runtime.harness import SparkRunner, wait_until
from tests.security.conftest import SecureCluster

SOURCE = Path(fluvial.__file__).parent

# Calls that start a process; only fluvial/children.py may make them.
_SPAWNS = {
    ("subprocess", name) for name in ("run", "Popen", "call", "check_call", "check_output")
} | {("os", name) for name in ("system", "popen", "fork", "forkpty", "posix_spawn",
                               "posix_spawnp", "execv", "execve", "execvp", "execvpe", "spawnv",
                               "spawnve", "spawnl", "spawnlp")}  # fmt: skip
# The bench's query load: multiprocessing workers that query the application over HTTP with
# the serve token, the one secret they need; a benchmark tool, never started by fluvial run.
_ALLOWED = {("bench/queries.py", "multiprocessing")}


def spawns_outside_the_choke_point() -> list[str]:
    found = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        if relative == "children.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            where = f"{relative}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                target = node.func.value
                if isinstance(target, ast.Name) and (target.id, node.func.attr) in _SPAWNS:
                    found.append(f"{where} {target.id}.{node.func.attr}()")
            elif isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "os"):
                names = [a.name for a in node.names if (node.module, a.name) in _SPAWNS]
                found += [f"{where} from {node.module} import {name}" for name in names]
            elif isinstance(node, ast.Import | ast.ImportFrom):
                modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules.append(node.module)
                for module in modules:
                    top = module.split(".")[0]
                    if top in ("multiprocessing", "pty") and (relative, top) not in _ALLOWED:
                        found.append(f"{where} import {module}")
    return found


def test_every_spawn_goes_through_the_one_environment_rule() -> None:
    assert spawns_outside_the_choke_point() == []


def test_a_child_keeps_only_the_secrets_it_names(monkeypatch: pytest.MonkeyPatch) -> None:
    secret = {"FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": "pw", TOKEN_ENV: "tok", "PGPASSWORD": "pg",
              "AWS_SECRET_ACCESS_KEY": "aws"}  # fmt: skip
    plain = {"FLUVIAL_KAFKA_CLIENT_SSL_CA_LOCATION": "/ca.pem", "FLUVIAL_TEST_X": "x"}
    for name, value in {**secret, **plain}.items():
        monkeypatch.setenv(name, value)
    tool = children.child_environment()
    assert not set(secret) & set(tool) and plain.items() <= tool.items()
    reader = children.child_environment((TOKEN_ENV,))
    assert set(secret) & set(reader) == {TOKEN_ENV}
    with children.secrets_withheld(children.fluvial_secret):  # Spark's JVM
        spark = dict(os.environ)
    assert set(secret) & set(spark) == {"PGPASSWORD", "AWS_SECRET_ACCESS_KEY"}
    assert secret.items() <= os.environ.items()  # this process keeps its own


# -- observing the real children ------------------------------------------------------------------


def recording_wrapper(path: Path, real: str, records: Path) -> None:
    """An executable at ``path`` that saves its environment under ``records``, then execs
    ``real`` with the same arguments (and so the same pid)."""
    path.write_text(
        "#!/bin/sh\n"
        f'cp /proc/$$/environ "{records}/$(basename "$0")-$$-$(date +%s%N)"\n'
        f'exec "{real}" "$@"\n'
    )
    path.chmod(0o755)


def java_home_wrapper(tmp_path: Path) -> tuple[Path, Path]:
    """A JAVA_HOME whose ``java`` and ``keytool`` record their environments in ``records``."""
    from fluvial.jvm import java_executable

    real_bin = Path(java_executable()).resolve().parent
    home, records = tmp_path / "java-home", tmp_path / "records"
    (home / "bin").mkdir(parents=True)
    records.mkdir()
    for tool in ("java", "keytool"):
        recording_wrapper(home / "bin" / tool, str(real_bin / tool), records)
    return home, records


def recorded(records: Path) -> dict[str, str]:
    """Recorded environment per wrapper run (``java-PID-TIME``)."""
    return {p.name: p.read_bytes().decode(errors="replace") for p in sorted(records.iterdir())}


def descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def live_environments(pid: int) -> dict[str, str]:
    """The environment of every running descendant of ``pid``, by pid and command."""
    found = {}
    for child in descendants(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            environ = Path(f"/proc/{child}/environ").read_bytes()
        except OSError:
            continue
        found[f"{child} {cmdline.decode(errors='replace')[:120]}"] = environ.decode(
            errors="replace"
        )
    return found


def holding(environments: dict[str, str], secret_values: dict[str, str]) -> list[str]:
    return [
        f"{where}: {name}"
        for where, environ in environments.items()
        for name, value in secret_values.items()
        if value in environ
    ]


@dataclass
class ServingRunner(SparkRunner):
    """``fluvial run`` of the Figure 2 app with ``--serve`` (the local engine's reader)."""

    def start(self, *, prometheus_port: int | None = None) -> None:
        cmd = [sys.executable, "-m", "fluvial.cli", "run", str(self.app), "--engine", self.engine,
               "--serve", f"127.0.0.1:{free_port()}"]  # fmt: skip
        if self.engine == "spark":
            cmd += ["--master", self.master]
        self._launch(cmd, {"FLUVIAL_SPARK_LEASE_MS": str(self.lease_ms)}, prometheus_port)


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_no_child_of_fluvial_run_holds_a_secret(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path, engine: str
) -> None:
    cluster = secure_cluster
    app_id = unique_name("child-env")
    input_topic = cluster.create_topic(unique_name("pageviews"))
    output_topic = cluster.create_topic(unique_name("counts"))
    java_home, records = java_home_wrapper(tmp_path)
    # The password and the token from the environment (as a secret store injects them), beside
    # a settings file without the password; an admin password the app has no use for.
    settings = cluster.settings("admin")
    password = settings.pop("sasl.password")
    settings_file = tmp_path / "without-password.properties"
    write_client_properties(settings_file, cluster.bootstrap, settings)
    token = secrets.token_urlsafe(18)
    decoy = secrets.token_urlsafe(18)
    secret_values = {
        "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": password,
        TOKEN_ENV: token,
        "FLUVIAL_KAFKA_ADMIN_PASSWORD": decoy,
    }
    env = {
        **secret_values,
        "FLUVIAL_KAFKA_CLIENT_CONFIG": str(settings_file),
        "JAVA_HOME": str(java_home),
    }
    if engine == "spark":
        python = tmp_path / "python"
        recording_wrapper(python, sys.executable, records)
        env["PYSPARK_PYTHON"] = str(python)
    runner = ServingRunner(
        cluster.bootstrap, app_id, input_topic, output_topic, tmp_path / "state",
        commit_ms=300, extra_env=env, engine=engine,
    )  # fmt: skip
    runner.start()
    runner.wait_ready(180)
    assert runner.proc is not None and runner.proc.poll() is None, runner.output()
    live: dict[str, str] = {}

    def children_seen() -> bool:
        live.update(live_environments(runner.proc.pid))
        names = recorded(records)
        if engine == "spark":  # the JVM and a Python worker of a slot
            return any(n.startswith("python-") for n in names) and len(live) >= 2
        return any("fluvial.iq.reader" in where for where in live)

    wait_until(children_seen, 120, f"the children of fluvial run ({engine})", interval_s=0.2)
    runner.signal(signal.SIGTERM)  # how it stops is not the question here
    runner.wait(60)

    seen = recorded(records)
    if engine == "spark":  # java -version, Spark's launcher and JVM, its Python workers
        assert sum(n.startswith("java-") for n in seen) >= 2, seen.keys()
    readers = {w: e for w, e in live.items() if "fluvial.iq.reader" in w}
    others = {w: e for w, e in {**seen, **live}.items() if w not in readers}
    assert holding(others, secret_values) == [], runner.output()
    if engine == "local":
        assert readers, live.keys()
        # The reader checks the token and never talks to Kafka: the token is all it keeps.
        assert holding(readers, secret_values) == [f"{w}: {TOKEN_ENV}" for w in readers]
