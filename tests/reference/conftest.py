"""The reference app's jar, built once per session (and only when its sources changed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.verify.differential.reference import build_reference_jar


@pytest.fixture(scope="session")
def reference_jar() -> Path:
    """``reference/target/fluvial-reference.jar``; errors (never skips) without Java or Maven."""
    return build_reference_jar()
