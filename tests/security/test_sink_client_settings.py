"""``fluvial sink postgres`` takes Kafka client settings as ``fluvial run`` does: a file
(``--client-config`` or ``$FLUVIAL_KAFKA_CLIENT_CONFIG``) and ``FLUVIAL_KAFKA_CLIENT_*``
variables, never a password on the command line; they are checked before the sink starts.

Only the option parsing is tested here: the sink itself is not run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from fluvial.cli import app
from fluvial.sinks import cli as sink_cli

SETTINGS = """\
bootstrap.servers=broker-1.example.com:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=sink-app
ssl.ca.location=/etc/fluvial/ca.pem
"""
ARGS = ["sink", "postgres", "--topic", "counts", "--table", "pageview_counts",
        "--dsn", "postgresql://sink@db/pages"]  # fmt: skip


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, object]]:
    """What the command did, in order, instead of checking the cluster and running."""
    calls: list[tuple[str, object]] = []
    monkeypatch.setattr("fluvial.acls.check_sink_access", lambda sinks: calls.append(
        ("checked", list(sinks)[0])))  # fmt: skip
    monkeypatch.setattr(sink_cli, "run_sink", lambda sink, **_: calls.append(("ran", sink)) or 0)
    for name in ("FLUVIAL_KAFKA_CLIENT_CONFIG", "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return calls


def test_settings_come_from_the_file_and_the_environment(
    started: list[tuple[str, object]], tmp_path: Path
) -> None:
    settings = tmp_path / "sink.properties"
    settings.write_text(SETTINGS)
    result = CliRunner().invoke(
        app, [*ARGS, "--client-config", str(settings)],
        env={"FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": "sink-pw-3e9a"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [what for what, _ in started] == ["checked", "ran"]  # checked before it starts
    sink = started[1][1]
    assert sink.bootstrap_servers == "broker-1.example.com:9093"  # type: ignore[attr-defined]
    assert sink.client_config == {  # type: ignore[attr-defined]
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "sink-app",
        "ssl.ca.location": "/etc/fluvial/ca.pem",
        "sasl.password": "sink-pw-3e9a",
    }
    assert "sink-pw-3e9a" not in result.output


def test_the_settings_file_may_come_from_the_environment(
    started: list[tuple[str, object]], tmp_path: Path
) -> None:
    settings = tmp_path / "sink.properties"
    settings.write_text(SETTINGS)
    result = CliRunner().invoke(
        app, [*ARGS, "--bootstrap-servers", "10.0.0.7:9093"],
        env={"FLUVIAL_KAFKA_CLIENT_CONFIG": str(settings)},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    sink = started[-1][1]
    assert sink.bootstrap_servers == "10.0.0.7:9093"  # type: ignore[attr-defined]
    assert sink.client_config["sasl.username"] == "sink-app"  # type: ignore[attr-defined]


def test_without_settings_the_sink_reads_the_local_cluster(
    started: list[tuple[str, object]],
) -> None:
    result = CliRunner().invoke(app, ARGS)
    assert result.exit_code == 0, result.output
    sink = started[-1][1]
    assert sink.bootstrap_servers == "127.0.0.1:9092"  # type: ignore[attr-defined]
    assert sink.client_config == {}  # type: ignore[attr-defined]


def test_an_unreadable_settings_file_stops_it_before_it_starts(
    started: list[tuple[str, object]], tmp_path: Path
) -> None:
    result = CliRunner().invoke(app, [*ARGS, "--client-config", str(tmp_path / "absent")])
    assert result.exit_code == 1
    assert "cannot read client settings file" in result.output
    assert started == []
