"""A client whose ``security.protocol`` does not match the listener is refused within seconds,
in every command that connects, with the setting named and what the listener expects (before,
librdkafka logged disconnects for many seconds, then a traceback about metadata)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fluvial.kafka.security import (
    KafkaSecurityError,
    check_connection,
    listener_protocol,
    write_client_properties,
)
from tests.runtime.harness import APP
from tests.security.conftest import SecureCluster
from tests.security.test_secured_cluster import fluvial_cli

pytestmark = [pytest.mark.kafka]


def test_each_listener_protocol_is_told_apart(
    secure_cluster: SecureCluster, bootstrap_servers: str
) -> None:
    assert listener_protocol(secure_cluster.bootstrap) == "SASL_SSL"
    assert listener_protocol(bootstrap_servers) == "PLAINTEXT"


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT"])
def test_a_client_of_another_protocol_is_refused_at_once(
    secure_cluster: SecureCluster, protocol: str
) -> None:
    settings = {**secure_cluster.settings("admin"), "security.protocol": protocol}
    started = time.monotonic()
    with pytest.raises(KafkaSecurityError) as refused:
        check_connection(secure_cluster.bootstrap, settings)
    assert time.monotonic() - started < 10
    assert f"security.protocol is {protocol}" in str(refused.value)
    assert "expects SASL_SSL" in str(refused.value)
    assert "set security.protocol=SASL_SSL" in str(refused.value)


def test_a_secured_client_of_a_plaintext_listener_is_refused_at_once(
    secure_cluster: SecureCluster, bootstrap_servers: str
) -> None:
    with pytest.raises(KafkaSecurityError, match="expects PLAINTEXT"):
        check_connection(bootstrap_servers, secure_cluster.settings("admin"))


@pytest.mark.slow
def test_every_command_that_connects_names_the_protocol(
    secure_cluster: SecureCluster, unique_name, tmp_path: Path
) -> None:
    """A settings file naming the secured cluster but no security settings (PLAINTEXT)."""
    plain = tmp_path / "plain.properties"
    write_client_properties(plain, secure_cluster.bootstrap, {})
    topic = unique_name("never-read")
    env = {
        "FLUVIAL_KAFKA_CLIENT_CONFIG": str(plain),
        "FLUVIAL_TEST_INPUT": topic,
        "FLUVIAL_TEST_OUTPUT": topic + "-out",
        "FLUVIAL_TEST_APP_ID": unique_name("plain"),
        "FLUVIAL_TEST_BOOTSTRAP": secure_cluster.bootstrap,
        "FLUVIAL_TEST_STATE_DIR": str(tmp_path / "state"),
    }
    commands = {
        "run": ["run", str(APP), "--engine", "local", "--quiet"],
        "reset": ["reset", "plain-app", "--state-dir", str(tmp_path / "state")],
        "acls --apply": ["acls", str(APP), "--principal", "User:nobody", "--apply"],
        "sink postgres": ["sink", "postgres", "--topic", topic, "--table", "t",
                          "--dsn", "postgresql://127.0.0.1:1/none", "--quiet"],
    }  # fmt: skip
    for name, args in commands.items():
        started = time.monotonic()
        result = fluvial_cli(*args, env=env)
        took = time.monotonic() - started
        output = result.stdout + result.stderr
        assert result.returncode == 1, f"{name}: {output}"
        assert "security.protocol is PLAINTEXT" in output, f"{name}: {output}"
        assert "expects SASL_SSL" in output, f"{name}: {output}"
        assert "Traceback" not in output and "Disconnected" not in output, f"{name}: {output}"
        # The refusal itself takes under a second (the test above); what a command adds is
        # its interpreter's start-up and imports, which took 48 s on a machine loaded 5-fold.
        assert took < 120, f"{name} took {took:.1f} s"
