"""Session-wide fixtures: one local Apache Kafka, one SparkSession, unique names per test.

Every integration test shares the session's cluster and SparkSession; factories hand each test
its own topic names and application ids so tests never see each other's data.

Every process a test starts goes through ``tests/processes.py``; however the test ends, the
processes it started are stopped when it ends, and the terminal summary names any that were
still running then.
"""

from __future__ import annotations

import atexit
import itertools
import os
import signal
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics
from tests import processes

# Modest heaps: Kafka and Spark share a 2-core machine with the tests themselves.
TEST_BROKER_HEAP = os.environ.get("FLUVIAL_TEST_BROKER_HEAP", "768m")
TEST_SPARK_MEMORY = os.environ.get("FLUVIAL_TEST_SPARK_MEMORY", "1g")

_counter = itertools.count()
_left_running: list[str] = []  # processes tests left behind, stopped by the fixtures below


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM to pytest (a CI job cancelled, a runner's own timeout) unwinds like Ctrl-C, so
    # fixtures tear down and stop what the tests started; by default it would end pytest at
    # once and leave them running. A second SIGTERM meanwhile is ignored: teardown is bounded.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        terminated = []

        def on_sigterm(signum: int, frame: object) -> None:
            if not terminated:
                terminated.append(signum)
                raise KeyboardInterrupt("SIGTERM")

        signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(processes.stop_all, everything=True)  # if pytest ends without teardown


@pytest.fixture(autouse=True)
def _stop_processes_the_test_started(request: pytest.FixtureRequest) -> Iterator[None]:
    """Stop every process the test started that still runs when it ends, however it ends."""
    processes.set_owner(request.node.nodeid)
    try:
        yield
    finally:
        processes.set_owner(None)
        left = processes.stop_all(request.node.nodeid)
        _left_running.extend(f"{request.node.nodeid}: {what}" for what in left)


@pytest.fixture(scope="session", autouse=True)
def _stop_every_registered_process() -> Iterator[None]:
    """The session's safety net: whatever a session fixture (or anything else) registered."""
    yield
    _left_running.extend(f"session: {what}" for what in processes.stop_all(everything=True))


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001 - pytest's reporter
    if _left_running:
        terminalreporter.section("processes still running when their test ended (stopped)")
        for line in _left_running:
            terminalreporter.line(line)


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafka]:
    """The session's single-broker local Kafka, on a free port, stopped at the end."""
    data_dir = tmp_path_factory.mktemp("kafka")
    # Retention is checked every 5 s (the default is 5 min), so a changelog whose records a
    # store still needs but the broker may delete shows up as a failing test, not in production.
    with LocalKafka(
        data_dir,
        port=free_port(),
        heap=TEST_BROKER_HEAP,
        broker_config={"log.retention.check.interval.ms": 5000},
    ) as cluster:
        for node_id in cluster.node_ids():  # stopped by the cluster; the safety net if not
            pid = cluster.pid(node_id)
            if pid is not None:
                processes.adopt(pid, f"the session's Kafka broker {node_id}")
        yield cluster


@pytest.fixture(scope="session")
def bootstrap_servers(kafka_cluster: LocalKafka) -> str:
    return kafka_cluster.bootstrap_servers


@pytest.fixture(scope="session")
def spark(kafka_cluster: LocalKafka):  # noqa: ANN201 - pyspark is imported lazily
    """The session's SparkSession (``local[2]``) with Spark's Kafka connector."""
    from fluvial.spark import local_spark_session

    session = local_spark_session(
        "local[2]", app_name="fluvial-tests", driver_memory=TEST_SPARK_MEMORY
    )
    yield session
    session.stop()


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names unique to this test: ``unique_name("input")`` → ``test-foo-input-3-1a2b3c``."""
    test = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:40]
    token = uuid.uuid4().hex[:6]

    def make(label: str) -> str:
        return f"{test}-{label}-{next(_counter)}-{token}"

    return make


@pytest.fixture
def app_id_factory(unique_name: Callable[[str], str]) -> Callable[[], str]:
    return lambda: unique_name("app")


@pytest.fixture
def topic_factory(bootstrap_servers: str, unique_name: Callable[[str], str]) -> Callable[..., str]:
    """Create a topic with a unique name on the session cluster and return its name."""

    def make(label: str = "topic", partitions: int = 1, **config: str) -> str:
        name = unique_name(label)
        create_topics(
            bootstrap_servers,
            [
                TopicSpec(
                    name, partitions, config={k.replace("_", "."): v for k, v in config.items()}
                )
            ],
        )
        return name

    return make


@pytest.fixture
def fluvial_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private FLUVIAL_HOME so CLI tests never touch the user's clusters."""
    monkeypatch.setenv("FLUVIAL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"
