"""The docs build as `make docs` builds them, and their examples run.

The build is strict: a broken link or reference fails it, and so does a public name without a
docstring or a place in docs/reference (docs/hooks/reference_check.py).
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from pathlib import Path

import pytest

import fluvial
from tests import processes
from tests.reference_hook import reference_check

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "reference" / "examples.md"


@pytest.mark.slow
def test_docs_build_strictly(tmp_path: Path) -> None:
    result = processes.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    home = (tmp_path / "site" / "index.html").read_text()
    assert "make test" in home and "make demo" in home  # the home page is the README
    assert (tmp_path / "site" / "reference" / "dsl" / "index.html").exists()
    # The settings table is generated into the reference page, with every setting's default.
    config_page = (tmp_path / "site" / "reference" / "config" / "index.html").read_text()
    from fluvial.config import settings

    for name, default, _ in settings():
        assert f"<code>{name}</code>" in config_page, name
        assert html.escape(default, quote=False) in config_page, (name, default)
    # Methods of the DSL's intermediate classes are on the page, with their docstrings.
    dsl_page = (tmp_path / "site" / "reference" / "dsl" / "index.html").read_text()
    for method in ("TimeWindowedKStream.aggregate", "SessionWindowedKStream.count",
                   "CogroupedKStream.aggregate", "KGroupedTable.count", "BranchedKStream.branch",
                   "Branched.with_function"):  # fmt: skip
        assert f'id="fluvial.dsl.{method}"' in dsl_page or f'id="fluvial.{method}"' in dsl_page, (
            method
        )


def interpreted_problems(pages: Path) -> list[str]:
    """The reference check over ``pages`` as the docs build runs it: on the engine's source,
    interpreted (mypyc's compiled classes carry no docstrings; the hook sets
    FLUVIAL_INTERPRETED=1 before fluvial is imported, which this process did long ago)."""
    code = ("import json, pathlib, sys\n"
            "from tests.reference_hook import reference_check\n"
            "print(json.dumps(reference_check().problems(pathlib.Path(sys.argv[1]))))\n")  # fmt: skip
    env = {**os.environ, "FLUVIAL_INTERPRETED": "1", "FLUVIAL_REQUIRE_COMPILED": ""}
    result = processes.run([sys.executable, "-c", code, str(pages)], timeout=120, cwd=ROOT,
                           env=env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    return list(json.loads(result.stdout.splitlines()[-1]))


def test_reference_check_finds_an_undocumented_name(tmp_path: Path) -> None:
    assert interpreted_problems(ROOT / "docs" / "reference") == []
    pages = tmp_path / "reference"
    pages.mkdir()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        (pages / page.name).write_text(page.read_text().replace("::: fluvial.Named\n", ""))
    assert "fluvial.Named is on no page of docs/reference (add '::: fluvial.Named')" in (
        interpreted_problems(pages)
    )


def test_reference_check_walks_the_methods_of_public_classes(monkeypatch) -> None:  # noqa: ANN001
    """A public method or property without a docstring is shown as nothing by mkdocstrings: the
    check names it, whether the class defines it or inherits it from a private mixin."""
    from fluvial.dsl import grouped, options

    hook = reference_check()
    monkeypatch.setattr(grouped.TimeWindowedKStream.aggregate, "__doc__", None)
    monkeypatch.setattr(fluvial.KTable.queryable_store_name.fget, "__doc__", "  ")
    monkeypatch.setattr(vars(options._WithName)["with_name"].__wrapped__, "__doc__", None)
    found = hook.problems(ROOT / "docs" / "reference")
    assert "fluvial.dsl.TimeWindowedKStream.aggregate has no docstring" in found
    assert "fluvial.KTable.queryable_store_name has no docstring" in found
    for option in ("Consumed", "Produced", "Grouped", "Repartitioned", "Joined", "StreamJoined"):
        assert f"fluvial.{option}.with_name has no docstring" in found
    assert not any(".with_key_serde " in problem for problem in found)


def test_reference_check_refuses_a_returned_dsl_class_that_is_not_exported(monkeypatch) -> None:  # noqa: ANN001
    """A user holds what ``windowed_by`` returns: that class must be exported and shown."""
    import fluvial.dsl

    hook = reference_check()
    exported = [name for name in fluvial.dsl.__all__ if name != "SessionWindowedKStream"]
    monkeypatch.setattr(fluvial.dsl, "__all__", exported)
    assert (
        "fluvial.dsl.KGroupedStream.windowed_by returns "
        "fluvial.dsl.session.SessionWindowedKStream, which no public module exports "
        "(add it to one's __all__ and to a page)"
    ) in hook.problems(ROOT / "docs" / "reference")


@pytest.mark.parametrize(
    "block",
    re.findall(r"```python\n(.*?)```", EXAMPLES.read_text(), re.S),
    ids=lambda block: "example",
)
def test_reference_examples_run(block: str) -> None:
    exec(compile(block, str(EXAMPLES), "exec"), {"__name__": "docs_example"})  # noqa: S102


def test_package_docstring_points_to_what_exists() -> None:
    assert fluvial.__doc__ is not None
    for path in re.findall(r"``([\w/.-]+\.md|docs/[\w/]*)``", fluvial.__doc__):
        assert (ROOT / path).exists(), path


def test_every_producer_in_the_readme_and_guides_writes_input_as_docs_backlog_asks() -> None:
    """A user copies the README's producer: it places keys as Java does and never reorders a
    partition on retries (docs/backlog.md: write input with an idempotent producer)."""
    import ast

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = 0
    for page in pages:
        for match in re.finditer(r"Producer\((\{.*?\})\)", page.read_text(), re.S):
            settings = ast.literal_eval(match.group(1))
            found += 1
            assert settings.get("enable.idempotence") in (True, "true"), (page.name, settings)
            assert settings.get("partitioner") == "murmur2_random", (page.name, settings)
    assert found >= 1
    assert "enable.idempotence=true" in (ROOT / "docs" / "backlog.md").read_text()
