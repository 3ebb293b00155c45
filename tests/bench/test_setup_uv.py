"""``fluvial bench setup`` finds the uv that ``make setup`` installed, without uv on PATH."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.bench import setup


def test_finds_the_uv_make_setup_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout = tmp_path / "checkout"
    uv = checkout / ".tools" / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text("#!/bin/sh\n")
    uv.chmod(0o755)
    monkeypatch.setattr(setup, "REPO_ROOT", checkout)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("UV", raising=False)
    assert setup.find_uv() == str(uv)


def test_without_any_uv_says_to_run_make_setup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(setup, "REPO_ROOT", tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("UV", raising=False)
    with pytest.raises(setup.PeerSetupError, match="make setup"):
        setup.find_uv()
