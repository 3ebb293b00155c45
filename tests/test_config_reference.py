"""StreamsConfig's settings are one table, generated from their definitions: in the reference
page, in ``fluvial run --help-config`` and in ``help(StreamsConfig)``."""

from __future__ import annotations

import sys
from dataclasses import fields
from pathlib import Path

from fluvial import StreamsConfig
from fluvial.config import settings, settings_markdown
from tests import processes
from tests.reference_hook import reference_check

ROOT = Path(__file__).resolve().parent.parent
CONFIG_PAGE = ROOT / "docs" / "reference" / "config.md"


def test_every_setting_says_what_it_means() -> None:
    names = [f.name for f in fields(StreamsConfig)]
    described = {name: meaning for name, _, meaning in settings()}
    assert list(described) == names
    assert all(len(meaning.split()) >= 5 for meaning in described.values()), described
    assert len(names) >= 19


def test_the_reference_page_shows_every_setting_with_its_default() -> None:
    page = reference_check().on_page_markdown(CONFIG_PAGE.read_text())
    assert "streams-config-settings" not in page  # the marker became the table
    assert "| `application_id` | `'fluvial-app'` | Names the application" in page
    assert "| `cache_max_bytes` | `10485760` |" in page
    assert "| `commit_interval_ms` | 100 under exactly_once_v2, 30000 under at_least_once |" in page
    for name, default, meaning in settings():
        row = next(line for line in page.splitlines() if line.startswith(f"| `{name}` |"))
        escaped = meaning.replace("<", "&lt;").replace(">", "&gt;")  # <state_dir> is no tag
        assert default in row and escaped[:40] in row, row
    assert settings_markdown() in page


def test_a_page_without_the_settings_table_fails_the_docs_check(tmp_path: Path) -> None:
    check = reference_check()
    pages = tmp_path / "reference"
    pages.mkdir()
    for page in (ROOT / "docs" / "reference").glob("*.md"):
        (pages / page.name).write_text(page.read_text().replace(check.SETTINGS_MARKER, ""))
    assert any("StreamsConfig's settings" in problem for problem in check.problems(pages))


def test_help_config_prints_every_setting_and_its_default() -> None:
    fluvial = Path(sys.executable).parent / "fluvial"
    # No APP.py: the settings are asked for before any application is loaded.
    result = processes.run([fluvial, "run", "--help-config"], timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name, default, meaning in settings():
        assert f"{name} = {default}" in lines, name
        assert meaning.split()[0] in result.stdout
    assert "commit_interval_ms = 100 under exactly_once_v2, 30000 under at_least_once" in lines
    assert "processing_exception_handler = 'fail'" in lines
    assert max(len(line) for line in lines) <= 100


def test_help_of_streams_config_lists_every_setting() -> None:
    assert StreamsConfig.__doc__ is not None
    for name, default, _ in settings():
        assert f"{name} = {default}" in StreamsConfig.__doc__


def test_a_setting_without_a_meaning_fails_the_docs_check(monkeypatch) -> None:  # noqa: ANN001
    import fluvial.config

    described = fluvial.config.settings()
    undescribed = [(name, default, "") if name == "state_dir" else (name, default, meaning)
                   for name, default, meaning in described]  # fmt: skip
    monkeypatch.setattr(fluvial.config, "settings", lambda: undescribed)
    found = reference_check().problems(ROOT / "docs" / "reference")
    assert any(
        problem.startswith("StreamsConfig setting state_dir says nothing") for problem in found
    )
