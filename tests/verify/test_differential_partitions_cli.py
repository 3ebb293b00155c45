"""``fluvial verify --differential N --partitions P``: bad arguments are refused before anything
starts, naming the problem and the fix."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fluvial.cli import app


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partitions", "3"], "--partitions goes with --differential N"),
        (["--differential", "5", "--partitions", "0"], "--partitions needs at least 1"),
        (["--differential", "5", "--partitions", "3", "--engine", "flink"], "unknown engine"),
    ],
)
def test_bad_arguments_are_refused(args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["verify", *args])
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())
