"""The docs build as `make docs` builds them, and their examples run.

The build is strict: a broken link or reference fails it, and so does a public name without a
docstring or a place in docs/reference (docs/hooks/reference_check.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import fluvial
from tests import processes

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


def test_reference_check_finds_an_undocumented_name(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import reference_check
    finally:
        sys.path.remove(str(ROOT / "docs" / "hooks"))
    assert reference_check.problems(ROOT / "docs" / "reference") == []
    pages = tmp_path / "reference"
    pages.mkdir()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        (pages / page.name).write_text(page.read_text().replace("::: fluvial.Named\n", ""))
    assert "fluvial.Named is on no page of docs/reference (add '::: fluvial.Named')" in (
        reference_check.problems(pages)
    )


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
