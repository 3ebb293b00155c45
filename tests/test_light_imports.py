"""``fluvial`` commands, sinks, readers and test subprocesses start without loading what they do
not use: importing the command line or the package loads neither the DSL, nor pyspark, nor
rich, nor pydantic, and the public names still resolve on first use."""

from __future__ import annotations

import json
import sys

import pytest

from tests import processes

HEAVY = ("pyspark", "fluvial.dsl", "fluvial.runtime", "fluvial.processor", "rich", "pydantic")


def _modules_after(code: str) -> list[str]:
    shown = processes.run(
        [sys.executable, "-c", f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"],
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    return json.loads(shown.stdout.splitlines()[-1])


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("code", ["import fluvial", "import fluvial.cli"])
def test_importing_fluvial_or_its_command_line_loads_nothing_heavy(code: str) -> None:
    assert _heavy(_modules_after(code)) == []


@pytest.mark.parametrize(
    "command", [["--help"], ["topics", "--help"], ["topics", "list", "--help"]]
)
def test_help_of_the_root_and_of_topics_loads_nothing_heavy(command: list[str]) -> None:
    code = (
        "import contextlib, io, sys\n"
        f"sys.argv = ['fluvial', *{command!r}]\n"
        "from fluvial.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    main()"
    )
    assert _heavy(_modules_after(code)) == []


def test_every_public_name_resolves_on_first_use() -> None:
    import fluvial

    code = "import fluvial\n" + "".join(f"fluvial.{name}\n" for name in fluvial.__all__)
    modules = _modules_after(code)
    assert "fluvial.dsl" in modules  # the names were loaded, on use
    names = {}
    exec("from fluvial import *", names)  # noqa: S102 - what `from fluvial import *` gives
    assert set(fluvial.__all__) - {"__version__"} <= set(names)
    assert fluvial.StreamsBuilder.__module__ == "fluvial.dsl.builder"
    assert fluvial.serdes.string().serialize("t", "x") == b"x"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
        _ = fluvial.NoSuchName  # type: ignore[attr-defined]
