"""``fluvial ... --help`` as a user reads it: in a narrow terminal, in a pipe, in a log."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from fluvial.cli import app
from tests import processes


def _help(*command: str, columns: int | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    if columns is not None:
        env["COLUMNS"] = str(columns)
    # Pipes for stdout and stderr: not a terminal, as in a pager, a log or a CI job.
    return processes.run(
        [sys.executable, "-m", "fluvial.cli", *command, "--help"], timeout=120, env=env
    )


def _commands(group=None, path=()):  # noqa: ANN001, ANN202 - click's types
    """Every command under ``group`` as (path, click command), groups included."""
    group = group or typer.main.get_command(app)
    yield path, group
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


def _option_names(command) -> list[str]:  # noqa: ANN001 - a click command
    return [name for param in command.params for name in (*param.opts, *param.secondary_opts)
            if name.startswith("-")]  # fmt: skip


@pytest.mark.parametrize("columns", [None, 40])
def test_run_help_names_every_option_whole_when_not_a_terminal(columns: int | None) -> None:
    shown = _help("run", columns=columns)
    assert shown.returncode == 0, shown.stderr
    run = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    names = _option_names(run)
    assert "--commit-interval-ms" in names and "--bootstrap-servers" in names
    words = set(shown.stdout.replace(",", " ").split())
    missing = [name for name in names if name not in words]
    assert not missing, f"cut or left out of `fluvial run --help`: {missing}\n{shown.stdout}"
    assert "…" not in shown.stdout
    # Descriptions wrap within the width instead of running off (or being cut at) the edge.
    width = columns or 80
    assert max(len(line) for line in shown.stdout.splitlines()) <= width


@pytest.mark.parametrize("columns", ["30", "200"])
def test_every_command_help_names_its_options_and_subcommands_whole(columns: str) -> None:
    runner = CliRunner()
    for path, command in _commands():
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": columns})
        assert shown.exit_code == 0, (path, shown.output)
        words = set(shown.output.replace(",", " ").split())
        missing = [name for name in _option_names(command) if name not in words]
        missing += [name for name in getattr(command, "commands", {}) if name not in words]
        assert not missing, f"cut in `fluvial {' '.join(path)} --help`: {missing}"
        # Lines stay within the width, except the command's own name on its usage line and an
        # option's names and metavar alone on their line, when longer than the width itself.
        over = [line for line in shown.output.splitlines() if len(line.rstrip()) > min(int(columns), 80)
                and not line.startswith("Usage:")
                and not (line.strip().startswith("-") and "  " not in line.strip())]  # fmt: skip
        assert not over, f"`fluvial {' '.join(path)} --help` runs over: {over}"
