"""What the Spark executors get from the driver: never a secret in their environment.

Executors rebuild the topology from the APP.py source and the driver's ``FLUVIAL_*``
variables (for apps configured from the environment); secrets reach them only inside each
lease (the client settings, the query token). No Spark and no broker needed.
"""

from __future__ import annotations

import os
import pickle
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

from fluvial import children
from fluvial.errors import ConfigError
from fluvial.iq.spark_routing import SlotEndpoint
from fluvial.redaction import is_secret_variable
from fluvial.spark.slots import EXECUTOR_STATE_DIR_ENV, AppSource, LeasePlan, _topology

SECRETS = {
    "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": "client-pw-5f1e",
    "FLUVIAL_KAFKA_CLIENT_SSL_KEY_PEM": "-----BEGIN PRIVATE KEY-----x",
    "FLUVIAL_KAFKA_CLIENT_SASL_OAUTHBEARER_CLIENT_SECRET": "oauth-secret-77a0",
    "FLUVIAL_KAFKA_ADMIN_PASSWORD": "admin-pw-90c3",
    "FLUVIAL_SERVE_TOKEN": "serve-token-2b8d",
    "FLUVIAL_SINK_DSN": "postgresql://app:dsn-pw-41aa@db/pages",
}
SETTINGS = {
    "FLUVIAL_TEST_INPUT": "pageviews",
    "FLUVIAL_KAFKA_CLIENT_SASL_USERNAME": "pageviews-app",
    "FLUVIAL_KAFKA_CLIENT_SSL_KEY_LOCATION": "/etc/fluvial/client.key",
    "FLUVIAL_KAFKA_CLIENT_CONFIG": "/etc/fluvial/pageviews.properties",
}


def write_app(tmp_path: Path, reads: str) -> Path:
    """An APP.py that reads the variable ``reads`` when it is loaded; unique text, so that
    the executor-side cache of rebuilt topologies never answers for another test's app."""
    path = tmp_path / f"envapp_{uuid.uuid4().hex[:8]}.py"
    path.write_text(
        "import os\n"
        "from fluvial import serdes\n\n\n"
        "def build(builder):\n"
        f"    topic = os.environ[{reads!r}]\n"
        "    builder.stream(topic, key_serde=serdes.string()).to(topic + '-out')\n"
    )
    return path


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_variables_are_told_by_the_settings_rule(name: str) -> None:
    assert is_secret_variable(name)


@pytest.mark.parametrize("name", sorted(SETTINGS))
def test_other_variables_are_not_secret(name: str) -> None:
    # A key *location* is a path, as ssl.key.location is for settings.
    assert not is_secret_variable(name)


def test_the_app_source_carries_no_secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [n for n in os.environ if n.startswith("FLUVIAL_")]:  # e.g. make test's own
        monkeypatch.delenv(name)
    for name, value in {**SECRETS, **SETTINGS, EXECUTOR_STATE_DIR_ENV: "/data"}.items():
        monkeypatch.setenv(name, value)
    source = AppSource.read(write_app(tmp_path, "FLUVIAL_TEST_INPUT"))

    assert source.env == SETTINGS  # the executor's own state dir is the executor's to set
    assert set(source.withheld) == set(SECRETS)
    shipped = pickle.dumps(source)  # what Spark broadcasts to every executor
    for value in SECRETS.values():
        assert value.encode() not in shipped
    for value in {**SECRETS, **SETTINGS}.values():
        assert value not in repr(source)


def test_executors_rebuild_an_app_configured_from_its_own_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLUVIAL_TEST_INPUT", "views-7c2")
    monkeypatch.setenv("FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD", "client-pw-5f1e")
    source = AppSource.read(write_app(tmp_path, "FLUVIAL_TEST_INPUT"))
    # An executor starts without the driver's environment.
    monkeypatch.delenv("FLUVIAL_TEST_INPUT")
    monkeypatch.delenv("FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD")

    topology = _topology(source)

    assert topology.source_topics() == ["views-7c2"]
    assert os.environ["FLUVIAL_TEST_INPUT"] == "views-7c2"
    assert "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD" not in os.environ


def test_one_python_worker_rebuilds_each_app_with_its_own_drivers_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A Python worker runs the leases of every application of its Spark context in turn.
    The same APP.py under another driver's values is another topology, and a variable the
    earlier application had, and this one has not, is gone when it loads."""
    app = write_app(tmp_path, "FLUVIAL_TEST_INPUT")
    monkeypatch.setenv("FLUVIAL_TEST_INPUT", "views-first")
    monkeypatch.setenv("FLUVIAL_TEST_EXTRA", "only-the-first")
    first = AppSource.read(app)
    monkeypatch.setenv("FLUVIAL_TEST_INPUT", "views-second")
    monkeypatch.delenv("FLUVIAL_TEST_EXTRA")
    second = AppSource.read(app)
    # The Python worker's own environment, as the first application's leases left it.
    monkeypatch.delenv("FLUVIAL_TEST_INPUT")

    assert first.digest != second.digest
    assert _topology(first).source_topics() == ["views-first"]
    assert os.environ["FLUVIAL_TEST_EXTRA"] == "only-the-first"
    assert _topology(second).source_topics() == ["views-second"]
    assert "FLUVIAL_TEST_EXTRA" not in os.environ
    assert _topology(first).source_topics() == ["views-first"]  # its own, still


def test_an_app_that_reads_a_secret_when_loaded_is_told_why_it_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD", "client-pw-5f1e")
    source = AppSource.read(write_app(tmp_path, "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD"))
    monkeypatch.delenv("FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD")

    with pytest.raises(ConfigError, match="FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD") as raised:
        _topology(source)
    assert "client-pw-5f1e" not in str(raised.value)
    assert "os.environ.get" in str(raised.value)


def test_spark_starts_without_fluvials_secrets_in_its_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The JVM is started inside this block; on a local master its Python workers inherit its
    environment. The driver keeps its own."""
    for name, value in {**SECRETS, **SETTINGS, "AWS_SECRET_ACCESS_KEY": "s3"}.items():
        monkeypatch.setenv(name, value)
    with children.secrets_withheld(children.fluvial_secret):  # as local_spark_session does
        inherited = dict(os.environ)
    assert not set(SECRETS) & set(inherited)
    assert {**SETTINGS, "AWS_SECRET_ACCESS_KEY": "s3"}.items() <= inherited.items()
    assert {**SECRETS, **SETTINGS}.items() <= os.environ.items()


def test_the_query_token_travels_in_the_lease_and_guards_the_slot_endpoint(
    tmp_path: Path,
) -> None:
    plan = LeasePlan("run", 1, 1, 1.0, None, {}, {}, serve_token="serve-token-2b8d")  # type: ignore[arg-type]
    assert "serve-token-2b8d" not in repr(plan)
    topology = _topology(AppSource(f"{uuid.uuid4().hex[:8]}.py", _TOPIC_APP))
    endpoint = SlotEndpoint(
        topology, "tokened", [], lambda: [], exactly_once=False, token=plan.serve_token
    )
    try:
        url = f"http://{endpoint.address}/stores"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=10)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": "Bearer serve-token-2b8d"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status != 401
    finally:
        endpoint.server.stop()


_TOPIC_APP = (
    "from fluvial import serdes\n\n\n"
    "def build(builder):\n"
    "    builder.stream('tokened-in', key_serde=serdes.string()).to('tokened-out')\n"
)
