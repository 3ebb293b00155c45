"""A new version of a topology never drops committed state in silence, on real Kafka.

Version 2 of ``apps/versions.py`` adds a guard in front of the re-key, which shifts the
generated names of the count's store and repartition topic. Every case runs version 1 over a
first batch of clicks, then version 2 over a second, on 3-partition topics, and checks each
user's final count against the oracle: over both batches where the state was kept (named
operators, ``fluvial upgrade``), over the second alone where its loss was allowed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from fluvial import serdes
from fluvial.errors import StateLossError
from fluvial.loader import load_app
from fluvial.runtime import Application
from fluvial.runtime.deployments import DeploymentPolicy, deployments_topic
from tests import processes
from tests.event_times import event_time_base_ms
from tests.runtime.harness import SparkRunner, flush, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(__file__).parent / "apps" / "versions.py"
USERS = 50
PARTITIONS = 3
# Generated names of the count in each version (an operator more shifts them by one).
V1_STORE = "KSTREAM-AGGREGATE-STATE-STORE-0000000002"
V2_STORE = "KSTREAM-AGGREGATE-STATE-STORE-0000000003"


class Deployments:
    """One application's topics and environment, deployed in versions."""

    def __init__(self, bootstrap: str, topic_factory, unique_name, tmp_path: Path) -> None:  # noqa: ANN001
        self.bootstrap = bootstrap
        self.clicks = topic_factory("clicks", PARTITIONS)
        self.counts = topic_factory("counts", PARTITIONS)
        self.app_id = unique_name("app")
        self.state_dir = tmp_path / "state"
        self.sent: list[str] = []  # the user of every click, in the order produced
        self.base_ms = event_time_base_ms()
        self.rng = random.Random(7)

    def env(self, version: int, named: bool = False) -> dict[str, str]:
        return {
            "FLUVIAL_TEST_INPUT": self.clicks,
            "FLUVIAL_TEST_OUTPUT": self.counts,
            "FLUVIAL_TEST_APP_ID": self.app_id,
            "FLUVIAL_TEST_BOOTSTRAP": self.bootstrap,
            "FLUVIAL_TEST_STATE_DIR": str(self.state_dir),
            "FLUVIAL_TEST_VERSION": str(version),
            "FLUVIAL_TEST_NAMED": "1" if named else "0",
        }

    def application(self, monkeypatch, version: int, *, named: bool = False,  # noqa: ANN001
                    policy: DeploymentPolicy | None = None) -> Application:  # fmt: skip
        for name, value in self.env(version, named).items():
            monkeypatch.setenv(name, value)
        loaded = load_app(APP)
        assert loaded.config is not None
        return Application(loaded.topology, loaded.config, deployment=policy)

    def produce(self, count: int, *, pace_s: float = 0.0) -> list[str]:
        """``count`` clicks of random users, keyed by click id, with Java's partitioner."""
        producer = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "partitioner": "murmur2_random"})  # fmt: skip
        users = []
        for _ in range(count):
            i = len(self.sent)
            user = f"user-{self.rng.randrange(USERS):02d}"
            producer.produce(self.clicks, key=f"click-{i}".encode(),
                             value=json.dumps({"user": user}).encode(),
                             timestamp=self.base_ms + i)  # fmt: skip
            self.sent.append(user)
            users.append(user)
            if pace_s:
                producer.poll(0)
                time.sleep(pace_s)
        flush(producer)
        return users

    def final_counts(self) -> dict[str, int]:
        latest: dict[str, int] = {}
        for partition in range(PARTITIONS):
            for m in read_topic(self.bootstrap, self.counts, partition=partition):
                latest[m.key().decode()] = serdes.long().deserialize(self.counts, m.value())
        return latest

    def wait_for_counts(self, expected: Counter[str], what: str, failed=lambda: None) -> None:  # noqa: ANN001
        wait_until(lambda: self.final_counts() == dict(expected) or failed(), 240, what)
        assert self.final_counts() == dict(expected), what

    def topics(self) -> set[str]:
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        return {t for t in admin.list_topics(timeout=30).topics if t.startswith(self.app_id)}

    def runner(self, version: int, *args: str, engine: str = "spark") -> SparkRunner:
        """``fluvial run`` of ``version`` as a process (stopped with the test)."""
        return SparkRunner(self.bootstrap, self.app_id, self.clicks, self.counts, self.state_dir,
                           app=APP, extra_env=self.env(version), args=list(args),
                           engine=engine)  # fmt: skip

    def cli(self, *args: str, version: int = 2) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, **self.env(version)}
        return processes.run([sys.executable, "-m", "fluvial.cli", *args], timeout=180, env=env)


def _run_version_1(d: Deployments, monkeypatch, named: bool = False) -> Counter[str]:  # noqa: ANN001
    """Version 1 over a backlog and then paced clicks; returns the oracle's counts."""
    first = d.produce(300)
    with d.application(monkeypatch, 1, named=named) as app:
        first += d.produce(300, pace_s=0.002)
        d.wait_for_counts(Counter(first), "version 1's counts", lambda: app.errors)
    app.raise_if_failed()
    return Counter(first)


def test_a_shifted_name_is_refused_then_carried_over_by_upgrade(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    counted = _run_version_1(d, monkeypatch)
    before = d.topics()

    with pytest.raises(StateLossError) as refused:
        d.application(monkeypatch, 2).start()
    message = str(refused.value)
    assert len(message.splitlines()) <= 24, message  # one screen
    assert f"store {V1_STORE}" in message and f"now {V2_STORE}" in message
    assert "fluvial upgrade APP.py" in message and "--allow-state-loss" in message
    assert d.topics() == before, "a refused start must create nothing"

    dry = d.cli("upgrade", str(APP), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    said = dry.stdout + dry.stderr
    assert f"would carry store {V1_STORE}" in said and f"-> {V2_STORE}" in said
    with pytest.raises(StateLossError):  # a dry run records nothing
        d.application(monkeypatch, 2).start()

    done = d.cli("upgrade", str(APP))
    assert done.returncode == 0, done.stderr + done.stdout
    assert "recorded" in done.stdout + done.stderr

    with d.application(monkeypatch, 2) as app:
        second = d.produce(300, pace_s=0.002) + d.produce(300)
        d.wait_for_counts(counted + Counter(second), "version 2 to continue every count",
                          lambda: app.errors)  # fmt: skip
    app.raise_if_failed()
    # Nothing was copied: version 2 kept version 1's topics, and made none of its own names.
    assert not any(V2_STORE in t for t in d.topics())


def test_named_operators_keep_their_state_across_versions(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    counted = _run_version_1(d, monkeypatch, named=True)
    with d.application(monkeypatch, 2, named=True) as app:
        second = d.produce(300) + d.produce(300, pace_s=0.002)
        d.wait_for_counts(counted + Counter(second), "the named count to continue",
                          lambda: app.errors)  # fmt: skip
    app.raise_if_failed()


def test_allowed_state_loss_starts_empty_and_is_recorded(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    _run_version_1(d, monkeypatch)
    allowed = DeploymentPolicy(allow_state_loss=frozenset({V1_STORE, f"{V1_STORE}-repartition"}))
    with d.application(monkeypatch, 2, policy=allowed) as app:
        second = d.produce(300, pace_s=0.002)
        d.wait_for_counts(Counter(second) + _untouched(d, second), "counts from zero",
                          lambda: app.errors)  # fmt: skip
    app.raise_if_failed()
    # The loss was recorded with the deployment: the next start needs no say-so.
    with d.application(monkeypatch, 2) as app:
        third = d.produce(100)
        d.wait_for_counts(Counter(second) + Counter(third) + _untouched(d, second + third),
                          "version 2 to go on", lambda: app.errors)  # fmt: skip
    app.raise_if_failed()


def _untouched(d: Deployments, since: list[str]) -> Counter[str]:
    """Users with no click since the loss keep version 1's last count in the output topic."""
    first = Counter(d.sent[: len(d.sent) - len(since)]) if since else Counter(d.sent)
    return Counter({user: n for user, n in first.items() if user not in set(since)})


def test_a_deleted_changelog_is_never_recreated_empty(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    _run_version_1(d, monkeypatch, named=True)
    changelog = f"{d.app_id}-clicks-per-user-changelog"
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    admin.delete_topics([changelog])[changelog].result(60)
    wait_until(lambda: changelog not in d.topics(), 60, "the changelog to be deleted")

    with pytest.raises(StateLossError, match=f"(?s)missing.*{changelog}"):
        d.application(monkeypatch, 1, named=True).start()
    assert changelog not in d.topics()
    assert deployments_topic(d.app_id) in d.topics()


@pytest.mark.soak
@pytest.mark.spark
def test_spark_refuses_a_shifted_name_and_continues_after_upgrade(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    first = d.produce(300)

    v1 = d.runner(1)
    v1.start()
    v1.wait_ready(240)
    first += d.produce(300, pace_s=0.002)
    d.wait_for_counts(Counter(first), "version 1's counts on Spark",
                      lambda: v1.proc.poll() is not None)  # fmt: skip
    assert v1.stop(120) == 0, v1.output()

    v2 = d.runner(2)
    v2.start()
    assert v2.wait(240) != 0
    assert f"store {V1_STORE}" in v2.output() and "fluvial upgrade" in v2.output()

    done = d.cli("upgrade", str(APP))
    assert done.returncode == 0, done.stderr + done.stdout
    v2 = d.runner(2)
    v2.start()
    v2.wait_ready(240)
    second = d.produce(300, pace_s=0.002)
    d.wait_for_counts(Counter(first) + Counter(second), "version 2 on Spark to continue",
                      lambda: v2.proc.poll() is not None)  # fmt: skip
    assert v2.stop(120) == 0, v2.output()


@pytest.mark.soak
@pytest.mark.spark
def test_spark_starts_empty_with_allow_state_loss(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    first = d.produce(200)

    v1 = d.runner(1)
    v1.start()
    d.wait_for_counts(Counter(first), "version 1's counts on Spark",
                      lambda: v1.proc.poll() is not None)  # fmt: skip
    assert v1.stop(120) == 0, v1.output()
    v2 = d.runner(2, "--allow-state-loss", f"{V1_STORE},{V1_STORE}-repartition")
    v2.start()
    v2.wait_ready(240)
    second = d.produce(200, pace_s=0.002)
    d.wait_for_counts(Counter(second) + _untouched(d, second), "counts from zero on Spark",
                      lambda: v2.proc.poll() is not None)  # fmt: skip
    assert v2.stop(120) == 0, v2.output()


def test_upgrade_and_reset_refuse_while_the_application_runs(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """fluvial's slots are assigned partitions, not group members: the driver record tells."""
    d = Deployments(bootstrap_servers, topic_factory, unique_name, tmp_path)
    first = d.produce(100)
    v1 = d.runner(1, engine="local")
    v1.start()
    v1.wait_ready(240)
    d.wait_for_counts(Counter(first), "version 1's counts", lambda: v1.proc.poll() is not None)
    for args in (("upgrade", str(APP)), ("reset", d.app_id, "--bootstrap-servers", d.bootstrap)):
        refused = d.cli(*args)
        said = refused.stdout + refused.stderr
        assert refused.returncode == 1 and "is running" in said, said
        assert "Traceback" not in said
    assert v1.stop(120) == 0, v1.output()
    assert deployments_topic(d.app_id) in d.topics()
