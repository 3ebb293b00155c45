"""Session-wide fixtures: one local Apache Kafka, one SparkSession, unique names per test.

Every integration test shares the session's cluster and SparkSession; factories hand each test
its own topic names and application ids so tests never see each other's data.

Every process a test starts goes through ``tests/processes.py``; however the test ends, the
processes it started are stopped when it ends, and the terminal summary names any that were
still running then.
"""

from __future__ import annotations

import atexit
import contextlib
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
    # Under pytest-xdist the tests and their fixtures live in the workers: the controller
    # passes the SIGTERM on to them (its only children) and ends once they have unwound.
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        terminated = []
        controller = _distributes(config)

        def on_sigterm(signum: int, frame: object) -> None:
            if not terminated:
                terminated.append(signum)
                if controller:
                    for worker in _children():
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(worker, signal.SIGTERM)
                    return
                raise KeyboardInterrupt("SIGTERM")

        signal.signal(signal.SIGTERM, on_sigterm)
    atexit.register(processes.stop_all, everything=True)  # if pytest ends without teardown


def _distributes(config: pytest.Config) -> bool:
    """Whether this is a pytest-xdist controller, whose workers run the tests."""
    if hasattr(config, "workerinput"):
        return False
    return bool(config.getoption("numprocesses", None)) and config.getoption("dist", "no") != "no"


def _children() -> list[int]:
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat[stat.rindex(")") + 2 :].split()[1] == me:
                found.append(int(entry.name))
    return found


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


# Under pytest-xdist (two workers, see pyproject.toml) tests go out one at a time, except these
# modules, whose tests share a module-scoped cluster of their own: one worker runs each of them
# whole, so the cluster is built once. A module-scoped fixture elsewhere is an error (below).
WHOLE_MODULES = frozenset(
    {
        "tests/faults/test_fault_matrix.py",
        "tests/kafka/test_three_brokers.py",
        "tests/bench/nexmark/test_kafka_streams_twins.py",
    }
)


def _module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN001, ANN201 - xdist's
    """``--dist loadgroup`` with WHOLE_MODULES as its groups.

    pytest-xdist's own ``xdist_group`` marks do not group under pytest 9.2 (pytest-xdist issue
    1386: the worker renames node ids, which pytest no longer lets it do), so the groups are
    named here, by module, and the scheduler is xdist's scope scheduler with one test as the
    scope of every other test. Units go out in the workers' collection order (the suite runs
    with ``--no-loadscope-reorder``), which pytest_collection_modifyitems below sets.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WholeModulesElseOneTest(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = _module_of(nodeid)
            return module if module in WHOLE_MODULES else nodeid

    return WholeModulesElseOneTest(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, hand out the longest work first, so the workers end together:
    WHOLE_MODULES first, then the tests marked slow, then the rest, which fill in behind them
    (each worker takes the next unit when it is done with one). Without workers the order
    stays as collected."""
    if not hasattr(config, "workerinput"):
        return
    items.sort(
        key=lambda item: (
            _module_of(item.nodeid) not in WHOLE_MODULES,
            item.get_closest_marker("slow") is None,
        )
    )


def pytest_fixture_setup(fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest) -> None:
    """A module-, class- or package-scoped fixture of the tests is built once per worker that
    runs its tests: only in WHOLE_MODULES is that one worker."""
    if fixturedef.scope in ("module", "class", "package") and fixturedef.baseid.startswith("tests"):
        module = _module_of(request.node.nodeid)
        if module not in WHOLE_MODULES:
            raise pytest.UsageError(
                f"{module} has the {fixturedef.scope}-scoped fixture {fixturedef.argname!r}: "
                "add the module to WHOLE_MODULES in tests/conftest.py, so that one pytest-xdist "
                "worker runs it whole and the fixture is built once"
            )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # An xdist worker hands what it stopped to the controller, which prints the summary.
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fluvial_left_running"] = list(_left_running)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:  # noqa: ANN001 - xdist's worker controller
    worker = getattr(node, "gateway", None)
    name = worker.id if worker is not None else "worker"
    left = getattr(node, "workeroutput", {}).get("fluvial_left_running", [])
    _left_running.extend(f"[{name}] {line}" for line in left)


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
