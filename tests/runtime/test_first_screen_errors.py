"""A new user's mistakes each give one message saying where and what to do, not a traceback.

Judged as a user sees them: the command's whole output, on its first screen.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka import free_port
from fluvial.kafka.diagnose import LIBRDKAFKA_LOGGER, check_reachable, kafka_logger
from tests import processes

SCREEN_LINES = 24


def fluvial(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return processes.run([sys.executable, "-m", "fluvial.cli", *args], timeout=timeout)


def write_app(folder: Path, body: str, name: str = "app.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(body))
    return path


def one_screen(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output, output
    assert len(output.splitlines()) <= SCREEN_LINES, output
    return output


def test_syntax_error_names_file_line_and_code(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        def build(builder):
            builder.stream("in").to("out"
        """,
    )
    output = one_screen(fluvial("describe", str(app)))
    assert f"syntax error in {app}:2" in output
    assert 'builder.stream("in").to("out"' in output


def test_unknown_streams_config_keyword_suggests_the_setting(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        from fluvial import StreamsConfig

        config = StreamsConfig(application_id="a", procesing_guarantee="exactly_once_v2")

        def build(builder):
            builder.stream("in").to("out")
        """,
    )
    output = one_screen(fluvial("describe", str(app)))
    assert f"{app}:3" in output
    assert "'procesing_guarantee' (did you mean 'processing_guarantee'?)" in output


def test_misspelt_client_config_key_is_named_before_anything_starts(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        from fluvial import StreamsConfig

        config = StreamsConfig(application_id="a", client_config={"sasl.usernam": "u"})

        def build(builder):
            builder.stream("in").to("out")
        """,
    )
    # An unreachable cluster: the key must be refused before any connection is tried.
    started = time.monotonic()
    output = one_screen(
        fluvial("run", str(app), "--engine", "local", "--bootstrap-servers", "127.0.0.1:1")
    )
    assert "'sasl.usernam'" in output and "did you mean 'sasl.username'?" in output
    assert str(app) in output
    assert time.monotonic() - started < 60


def test_debug_shows_the_traceback_of_a_failing_app(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        def build(builder):
            raise RuntimeError("no topic configured")
        """,
    )
    plain = one_screen(fluvial("describe", str(app)))
    assert f"{app}:2" in plain and "RuntimeError: no topic configured" in plain
    assert "--debug" in plain
    debug = fluvial("describe", str(app), "--debug")
    assert debug.returncode == 1
    assert (
        "Traceback" in debug.stderr and 'raise RuntimeError("no topic configured")' in debug.stderr
    )


def test_modules_beside_app_py_import_by_plain_name(tmp_path: Path) -> None:
    (tmp_path / "pipeline_topics.py").write_text('SOURCE = "orders-in"\n')
    app = write_app(
        tmp_path,
        """\
        from pipeline_topics import SOURCE

        def build(builder):
            builder.stream(SOURCE).to("out")
        """,
    )
    result = fluvial("describe", str(app))
    assert result.returncode == 0, result.stderr
    assert "orders-in" in result.stdout


@pytest.mark.slow
def test_unreachable_kafka_is_one_message_within_the_timeout(tmp_path: Path) -> None:
    app = write_app(
        tmp_path,
        """\
        def build(builder):
            builder.stream("in").to("out")
        """,
    )
    bootstrap = f"127.0.0.1:{free_port()}"  # nothing listens there
    started = time.monotonic()
    output = one_screen(
        fluvial("run", str(app), "--engine", "local", "--bootstrap-servers", bootstrap)
    )
    assert time.monotonic() - started < 60
    assert f"Kafka at {bootstrap} did not answer" in output
    assert "fluvial kafka status" in output
    assert "%3|" not in output  # no raw librdkafka lines


def test_check_reachable_gives_up_at_its_timeout() -> None:
    started = time.monotonic()
    with pytest.raises(FluvialError, match="did not answer within 2 s"):
        check_reachable(f"127.0.0.1:{free_port()}", timeout_s=2)
    assert time.monotonic() - started < 6


def test_librdkafka_lines_go_through_logging_once(caplog: pytest.LogCaptureFixture) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": f"127.0.0.1:{free_port()}", "logger": kafka_logger()})
    with caplog.at_level(logging.WARNING, logger=LIBRDKAFKA_LOGGER):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not caplog.records:
            producer.poll(0.1)
        for _ in range(20):  # librdkafka retries the connection many times meanwhile
            producer.poll(0.1)
    failures = [r for r in caplog.records if "Connection refused" in r.getMessage()]
    assert len(failures) == 1, [r.getMessage() for r in caplog.records]
    assert failures[0].levelno >= logging.WARNING
    assert logging.getLogger(LIBRDKAFKA_LOGGER).getEffectiveLevel() == logging.WARNING


def test_streams_config_refuses_unknown_keywords_in_python() -> None:
    from fluvial import StreamsConfig

    with pytest.raises(ConfigError, match=r"'commit_interval' \(did you mean 'commit_interval_ms'"):
        StreamsConfig(commit_interval=100)  # type: ignore[call-arg]
