"""A principal that lacks one ACL the application needs stops with a clear error, fast.

Each case gives the application's principal every ACL ``fluvial acls`` derives but one:
write on the output topic, read on the input topic, the transactional ids, or read on the
consumer group. Whether the ACL is missing at start or revoked while the application runs, on
either engine, the application stops within 30 s with an error that names the resource and
the missing operation and points at ``fluvial acls``; it never restarts its workers in a loop,
and the output topic holds no committed record.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
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

from fluvial.acls import AclRule, apply_acls, derive_acls
from fluvial.loader import load_app
from tests.event_times import event_time_base_ms
from tests.runtime.harness import APP, Runner, SparkRunner, generate_views, wait_until
from tests.security import secure_io
from tests.security.conftest import SecureCluster
from tests.security.test_secured_cluster import (
    app_env,
    assert_no_secrets,
    error_within_30s,
    fluvial_cli,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ENGINES = ["local", pytest.param("spark", marks=pytest.mark.spark)]


class App:
    """One application's names, and the ACLs ``fluvial acls`` derives for it."""

    def __init__(self, cluster: SecureCluster, unique_name: Callable[[str], str], state: Path):
        self.cluster = cluster
        self.user = cluster.new_user("app")
        self.principal = f"User:{self.user}"
        self.app_id = unique_name("app")
        self.input = cluster.create_topic(unique_name("pageviews"))
        self.output = cluster.create_topic(unique_name("counts"))
        self.state = state
        self.env = app_env(cluster, self.app_id, self.input, self.output, state)
        os.environ.update(self.env)  # the app module reads its topics from the environment
        try:
            loaded = load_app(APP)
        finally:
            for key in self.env:
                os.environ.pop(key)
        self.rules = derive_acls(loaded.topology, loaded.config)

    def lacking(self, case: str) -> AclRule:
        """The one derived rule that ``case`` takes away."""
        wanted = {
            "output-write": ("TOPIC", self.output, "WRITE"),
            "input-read": ("TOPIC", self.input, "READ"),
            "transactional-ids": ("TRANSACTIONAL_ID", f"{self.app_id}-", "WRITE"),
            "group-read": ("GROUP", self.app_id, "READ"),
        }[case]
        [rule] = [r for r in self.rules if (r.resource_type, r.name, r.operation) == wanted]
        return rule

    def runner(self, engine: str) -> Runner:
        env = {
            **self.env,
            "FLUVIAL_KAFKA_CLIENT_CONFIG": str(self.cluster.properties_file(self.user)),
        }
        kind = SparkRunner if engine == "spark" else Runner
        return kind(self.cluster.bootstrap, self.app_id, self.input, self.output, self.state,
                    commit_ms=300, extra_env=env)  # fmt: skip

    def produce_views(self) -> None:
        views = generate_views(seed=3, count=200, start_ms=event_time_base_ms())
        secure_io.produce(self.cluster.bootstrap, self.cluster.admin(), self.input, views)

    def revoke(self, rule: AclRule) -> None:
        admin = AdminClient({"bootstrap.servers": self.cluster.bootstrap, **self.cluster.admin()})
        binding = AclBindingFilter(
            ResourceType[rule.resource_type], rule.name, ResourcePatternType[rule.pattern],
            self.principal, "*", AclOperation[rule.operation], AclPermissionType.ALLOW,
        )  # fmt: skip
        [future] = admin.delete_acls([binding], request_timeout=30).values()
        assert len(future.result()) == 1, f"{rule} was not there to revoke"

    def assert_names_the_rule(self, output: str, rule: AclRule) -> None:
        kind = rule.resource_type.lower().replace("_", " ")
        assert f"{self.principal} is not authorized" in output, output
        assert f"{rule.operation} on {kind} '{rule.name}'" in output, output
        assert f"add  {rule.line(self.principal).split('  #')[0]}" in output, output
        assert f"fluvial acls APP.py --principal {self.principal} --apply" in output, output

    def assert_no_committed_output(self) -> None:
        records, _high = secure_io.read_all(
            self.cluster.bootstrap, self.cluster.admin(), self.output, committed=True
        )
        assert records == [], f"{len(records)} committed record(s) in the output"

    def committed_input(self) -> int:
        admin = self.cluster.admin()
        return secure_io.committed_offset(self.cluster.bootstrap, admin, self.app_id, self.input)


CASES = ["output-write", "input-read", "transactional-ids", "group-read"]


# On Spark the checks run before Spark starts, so no case pays for a JVM.
@pytest.mark.timeout(300)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES)
def test_a_missing_acl_stops_the_start_naming_the_resource_and_the_acl(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path, command_lines: set[str],
    case: str, engine: str,
) -> None:  # fmt: skip
    app = App(secure_cluster, unique_name, tmp_path / "state")
    missing = app.lacking(case)
    apply_acls([r for r in app.rules if r != missing], app.principal, app.cluster.bootstrap,
               app.cluster.admin())  # fmt: skip
    app.produce_views()
    runner = app.runner(engine)
    runner.start()
    code, output = error_within_30s(runner, "is not authorized")
    assert code != 0
    app.assert_names_the_rule(output, missing)
    # Checked before anything ran: no offsets and no record at all, committed or not.
    assert app.committed_input() < 0
    records, high = secure_io.read_all(
        app.cluster.bootstrap, app.cluster.admin(), app.output, committed=False
    )
    assert records == [] and high == 0
    if engine == "spark":
        # Spark prints its job group once it runs: the check came before it started.
        assert "job group" not in output, output
    assert_no_secrets(secure_cluster, {"run output": output})


# A Spark start under load has taken 100 s; the wait for the error itself is 30 s.
@pytest.mark.timeout(600)
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("case", CASES)
def test_an_acl_revoked_while_running_stops_the_application_within_30s(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path, command_lines: set[str],
    case: str, engine: str,
) -> None:  # fmt: skip
    app = App(secure_cluster, unique_name, tmp_path / "state")
    missing = app.lacking(case)
    apply_acls(app.rules, app.principal, app.cluster.bootstrap, app.cluster.admin())
    runner = app.runner(engine)
    runner.start()
    runner.wait_ready()
    if engine == "spark":
        # The slots run: a lease ended, and the next one holds the slot's clients.
        wait_until(lambda: any("slots" in e for e in runner.leases()), 120, "a completed lease")  # type: ignore[attr-defined]
    app.revoke(missing)
    revoked = time.monotonic()
    app.produce_views()
    try:
        wait_until(lambda: "is not authorized" in runner.output(), 30,
                   "the authorization error", interval_s=0.1)  # fmt: skip
    except AssertionError:
        runner.kill9()
        raise AssertionError("no authorization error within 30 s:\n" + runner.output()) from None
    assert time.monotonic() - revoked < 30
    code = runner.wait(60)
    output = runner.output()
    assert code != 0, output
    app.assert_names_the_rule(output, missing)
    # Stopped at the first refusal: never a restart from the last commit, never a retry.
    assert "restarting from the last commit" not in output, output
    assert "leases in a row failed" not in output, output
    app.assert_no_committed_output()
    if case != "output-write":
        # Nothing at all: without the ACL no transaction of the input's task committed. (With
        # only the output refused, the first sub-topology may commit its consistent share: its
        # input offsets with its repartition records.)
        assert app.committed_input() < 0
    assert_no_secrets(secure_cluster, {"run output": output})


@pytest.mark.timeout(300)
def test_a_principal_without_acls_is_told_every_rule_at_once(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path
) -> None:
    """The prefixed internal-topic rules and the transactional ids included, on a first start
    (no internal topic exists yet), in one message: not one refusal per attempt."""
    app = App(secure_cluster, unique_name, tmp_path / "state")
    assert len(app.rules) == 12
    runner = app.runner("local")
    runner.start()
    code, output = error_within_30s(runner, "is not authorized")
    assert code != 0
    for rule in app.rules:
        app.assert_names_the_rule(output, rule)
    assert output.count("is not authorized") == 1, output
    assert_no_secrets(secure_cluster, {"run output": output})


def test_a_sink_without_acls_is_told_every_rule_at_once(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path
) -> None:
    user = secure_cluster.new_user("sink")
    topic = secure_cluster.create_topic(unique_name("to-sink"))
    result = fluvial_cli(
        "sink", "postgres", "--topic", topic, "--table", "t", "--sink-id", "acl-check",
        "--dsn", "postgresql://127.0.0.1:1/none", "--quiet",
        env={"FLUVIAL_KAFKA_CLIENT_CONFIG": str(secure_cluster.properties_file(user))},
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert f"User:{user} is not authorized" in output, output
    assert f"READ on topic '{topic}'" in output, output
    assert "DESCRIBE on group 'fluvial-sink-acl-check'" in output, output
