"""fluvial against a secured Kafka: SASL_SSL with SCRAM-SHA-512, TLS, and enforced ACLs.

The application's principal holds exactly the ACLs ``fluvial acls`` derives; a wrong password
stops it at once with an error that says what to fix (a missing ACL too: see
``test_missing_acls.py``); and no password or key ever shows in a log, an output, a metric or a
command line.
"""

from __future__ import annotations

import json
import os
import random
import secrets
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from fluvial.acls import AclRule, derive_acls
from fluvial.kafka import free_port
from fluvial.kafka.security import write_client_properties
from fluvial.loader import load_app
from fluvial.verify.faults import is_spark_daemon
from tests.event_times import event_time_base_ms
from tests.runtime.harness import (
    APP,
    Runner,
    SparkRunner,
    check_revisions_exactly_once,
    generate_views,
    oracle_counts,
    wait_until,
)
from tests.security import secure_io
from tests.security.conftest import SecureCluster

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

KEY_MATERIAL = ("PRIVATE KEY",)


def app_env(cluster: SecureCluster, app_id: str, input_topic: str, output: str, state: Path):
    return {
        "FLUVIAL_TEST_INPUT": input_topic,
        "FLUVIAL_TEST_OUTPUT": output,
        "FLUVIAL_TEST_APP_ID": app_id,
        "FLUVIAL_TEST_BOOTSTRAP": cluster.bootstrap,
        "FLUVIAL_TEST_GUARANTEE": "exactly_once_v2",
        "FLUVIAL_TEST_STATE_DIR": str(state),
    }


def fluvial_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fluvial.cli", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def acls_of(cluster: SecureCluster, principal: str) -> set[tuple[str, str, str, str]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **cluster.admin()})
    query = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, principal, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    found = admin.describe_acls(query, request_timeout=30).result()
    return {
        (b.restype.name, b.resource_pattern_type.name, b.name, b.operation.name)
        for b in found
        if b.permission_type == AclPermissionType.ALLOW
    }


def as_tuples(rules: list[AclRule]) -> set[tuple[str, str, str, str]]:
    return {(r.resource_type, r.pattern, r.name, r.operation) for r in rules}


def assert_no_secrets(cluster: SecureCluster, texts: dict[str, str]) -> None:
    texts = {**texts, **broker_logs(cluster)}
    for where, text in texts.items():
        for secret in cluster.secrets():
            assert secret not in text, f"a password shows in {where}"
        for marker in KEY_MATERIAL:
            assert marker not in text, f"key material ({marker!r}) shows in {where}"


def broker_logs(cluster: SecureCluster) -> dict[str, str]:
    logs = {}
    for path in cluster.kafka.data_dir.rglob("*.log*"):
        if path.is_file() and "logs" not in path.relative_to(cluster.kafka.data_dir).parts[1:2]:
            logs[str(path)] = path.read_text(errors="replace")
    assert logs, "the broker writes logs"
    return logs


def error_within_30s(runner: Runner, marker: str) -> tuple[int, str]:
    """Wait for the application to start, then for ``marker`` within 30 s; return the exit."""
    wait_until(
        lambda: "fluvial: running" in runner.output() or runner.proc.poll() is not None,
        120,
        "the application to load (interpreter start-up under load is not its fault)",
        interval_s=0.1,
    )
    started = time.monotonic()
    try:
        wait_until(lambda: marker in runner.output(), 30, f"{marker!r}", interval_s=0.1)
    except AssertionError:
        runner.kill9()
        raise AssertionError(f"no {marker!r} within 30 s:\n" + runner.output()) from None
    assert time.monotonic() - started < 30
    try:
        code = runner.wait(60)
    except subprocess.TimeoutExpired:
        runner.kill9()
        raise AssertionError("it did not exit after the error:\n" + runner.output()) from None
    return code, runner.output()


def process_table() -> dict[int, tuple[int, str]]:
    """Every process: pid -> (parent pid, command line)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (
                    (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                )
            except OSError:
                continue
            found[int(entry.name)] = (int(stat.rpartition(")")[2].split()[1]), cmdline)
    return found


def environments_holding(texts: list[str]) -> set[int]:
    """The processes whose environment holds any of ``texts``."""
    holders = set()
    for pid in process_table():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(text in environ for text in texts):
            holders.add(pid)
    return holders


def assert_only_the_driver_holds(runner: Runner, texts: list[str]) -> None:
    """The driver took ``texts`` from its environment; neither Spark's JVM nor a Python
    worker (the executors of a local master) may have them in theirs."""
    assert runner.proc is not None
    driver = runner.proc.pid

    def python_workers() -> bool:
        table = process_table()
        family, grew = {driver}, True
        while grew:
            grown = {pid for pid, (parent, _) in table.items() if parent in family}
            grew = not grown <= family
            family |= grown
        return any(is_spark_daemon(table[pid][1]) for pid in family if pid in table)

    wait_until(python_workers, 120, "the driver's Python workers to run", interval_s=0.5)
    assert environments_holding(texts) == {driver}, "only the driver holds the secrets"


def fetch(url: str, token: str | None = None) -> str:
    """GET ``url``, retried while the server is busy (a loaded machine, a JVM starting)."""
    answer: list[str] = []
    headers = {"Authorization": f"Bearer {token}"} if token else {}

    def got() -> bool:
        try:
            request = urllib.request.Request(url, headers=headers)
            answer.append(urllib.request.urlopen(request, timeout=15).read().decode())
        except OSError:
            return False
        return True

    wait_until(got, 120, f"an answer from {url}", interval_s=1)
    return answer[-1]


def spark_environment_tab(ui_port: int) -> str:
    """The Spark UI's environment tab of the running driver, as its REST API serves it."""
    base = f"http://127.0.0.1:{ui_port}/api/v1/applications"
    [application] = json.loads(fetch(base))
    return fetch(f"{base}/{application['id']}/environment")


# Three application starts (two after kill -9) and a describe: on Spark, under load, a start
# alone has taken 100 s. Every wait inside has its own deadline; this is the backstop.
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.soak)])
def test_figure2_least_privilege_exactly_once_under_kill_9(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path, command_lines: set[str],
    engine: str,
) -> None:  # fmt: skip
    cluster = secure_cluster
    user = cluster.new_user("app")
    principal = f"User:{user}"
    app_id = unique_name("secured")
    input_topic = cluster.create_topic(unique_name("pageviews"))
    output_topic = cluster.create_topic(unique_name("counts"))
    env = app_env(cluster, app_id, input_topic, output_topic, tmp_path / "state")

    # The ACLs come from the topology, and --apply creates exactly those.
    applied = fluvial_cli(
        "acls", str(APP), "--principal", principal, "--apply",
        "--client-config", str(cluster.kafka.admin_config_file), env=env,
    )  # fmt: skip
    assert applied.returncode == 0, applied.stderr
    os.environ.update(env)  # the app module reads its topics from the environment
    try:
        loaded = load_app(APP)
    finally:
        for key in env:
            os.environ.pop(key)
    expected = derive_acls(loaded.topology, loaded.config)
    assert acls_of(cluster, principal) == as_tuples(expected)
    assert ("TOPIC", "LITERAL", input_topic, "READ") in as_tuples(expected)
    assert ("TOPIC", "LITERAL", output_topic, "WRITE") in as_tuples(expected)
    assert ("TRANSACTIONAL_ID", "PREFIXED", f"{app_id}-", "WRITE") in as_tuples(expected)
    assert ("GROUP", "LITERAL", f"{app_id}-driver", "READ") in as_tuples(expected)
    for rule in expected:
        assert rule.line(principal) in applied.stdout

    views = generate_views(seed=31, count=2400, start_ms=event_time_base_ms())
    oracle, dropped = oracle_counts(views)
    assert dropped > 0
    run_env = {**env, "FLUVIAL_KAFKA_CLIENT_CONFIG": str(cluster.properties_file(user))}
    ui_port = free_port()
    # Secrets the Spark driver takes from its environment: no executor may hold them in its own.
    held_by_driver: list[str] = []
    token = None
    if engine == "spark":
        # The Spark UI is on, so that its environment tab can be scanned too; executors get
        # the settings with each lease, never as a Spark setting or on a command line.
        run_env["FLUVIAL_SPARK_CONF"] = (
            f"spark.ui.enabled=true,spark.ui.port={ui_port},"
            "spark.python.worker.faulthandler.enabled=true"
        )
        # The password from the environment (as a secret store injects it), beside a file
        # without it; the token that guards the metrics and query endpoints as well.
        without_password = cluster.settings(user)
        password = without_password.pop("sasl.password")
        settings_file = tmp_path / "app-without-password.properties"
        write_client_properties(settings_file, cluster.bootstrap, without_password)
        token = secrets.token_urlsafe(18)
        run_env.update(
            FLUVIAL_KAFKA_CLIENT_CONFIG=str(settings_file),
            FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD=password,
            FLUVIAL_SERVE_TOKEN=token,
        )
        held_by_driver = [password, token]
        runner: Runner = SparkRunner(
            cluster.bootstrap, app_id, input_topic, output_topic, tmp_path / "state",
            commit_ms=300, extra_env=run_env,
        )  # fmt: skip
    else:
        runner = Runner(
            cluster.bootstrap, app_id, input_topic, output_topic, tmp_path / "state",
            commit_ms=300, extra_env=run_env,
        )  # fmt: skip
    outputs: dict[str, str] = {"acls stdout": applied.stdout, "acls stderr": applied.stderr}
    rng = random.Random(31)
    metrics_port = free_port()
    runner.start(prometheus_port=metrics_port)
    kills = 0
    for i in range(0, len(views), 300):
        secure_io.produce(cluster.bootstrap, cluster.admin(), input_topic, views[i : i + 300])
        time.sleep(rng.uniform(0.8, 2.0))
        if i // 300 in (2, 5):
            runner.wait_ready()
            outputs[f"metrics before kill {kills}"] = fetch(
                f"http://127.0.0.1:{metrics_port}/metrics", token
            )
            outputs[f"run output before kill {kills}"] = runner.output()
            if engine == "spark":
                tab = spark_environment_tab(ui_port)
                assert "spark.redaction.regex" in tab and "sasl" in tab, tab[:2000]
                outputs[f"Spark UI environment tab before kill {kills}"] = tab
                assert_only_the_driver_holds(runner, held_by_driver)
            runner.kill9()
            kills += 1
            runner.start(prometheus_port=metrics_port)
    assert kills == 2

    def final_counts() -> dict:
        last = {}
        for window, count in secure_io.read_revisions(
            cluster.bootstrap, cluster.admin(), output_topic
        ):
            last[window] = count
        return last

    try:
        wait_until(lambda: final_counts() == oracle, 180, "the output to reach the oracle")
        if engine == "spark":
            outputs["Spark UI environment tab"] = spark_environment_tab(ui_port)
            leases = [e for e in runner.leases() if "slots" in e]  # type: ignore[attr-defined]
            assert leases, "the slots ran as Spark tasks"
            outputs["leases.jsonl"] = json.dumps(leases)
    finally:
        outputs["final run output"] = runner.output()
        assert runner.stop() == 0, runner.output()
    outputs["run output after stop"] = runner.output()
    check_revisions_exactly_once(
        secure_io.read_revisions(cluster.bootstrap, cluster.admin(), output_topic), oracle
    )
    described = fluvial_cli("describe", str(APP), env=env)
    outputs["describe"] = described.stdout + described.stderr
    outputs["command lines"] = "\n".join(sorted(command_lines))
    assert any("fluvial.cli run" in line for line in command_lines), "the sampler saw the runs"
    if engine == "spark":
        assert any(is_spark_daemon(line) for line in command_lines), "and Spark's workers"
    assert_no_secrets(cluster, outputs)


def test_wrong_password_fails_fast_with_an_authentication_error(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path, command_lines: set[str]
) -> None:
    cluster = secure_cluster
    user = cluster.new_user("wrongpw")
    app_id = unique_name("wrongpw")
    input_topic = cluster.create_topic(unique_name("pageviews"))
    output_topic = cluster.create_topic(unique_name("counts"))
    env = app_env(cluster, app_id, input_topic, output_topic, tmp_path / "state")
    wrong = "not-" + cluster.credentials.passwords[user]
    cluster.credentials.passwords[f"{user}-wrong"] = wrong  # scanned for too
    runner = Runner(
        cluster.bootstrap, app_id, input_topic, output_topic, tmp_path / "state",
        extra_env={
            **env,
            "FLUVIAL_KAFKA_CLIENT_CONFIG": str(cluster.properties_file(user, wrong)),
        },
    )  # fmt: skip
    runner.start()
    code, output = error_within_30s(runner, "authentication failed")
    assert code != 0
    assert f"authentication failed at {cluster.bootstrap} for SASL user '{user}'" in output
    assert "sasl.password" in output  # names the fix
    # The same for the other commands that connect.
    reset = fluvial_cli(
        "reset", app_id, "--state-dir", str(tmp_path / "state"),
        env={"FLUVIAL_KAFKA_CLIENT_CONFIG": str(cluster.properties_file(user, wrong))},
    )  # fmt: skip
    assert reset.returncode == 1
    assert "authentication failed" in reset.stderr
    assert_no_secrets(
        cluster,
        {"run output": output, "reset": reset.stdout + reset.stderr,
         "command lines": "\n".join(sorted(command_lines))},
    )  # fmt: skip
