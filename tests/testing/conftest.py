"""Every DSL/driver test that takes ``store_type`` runs on both store backends."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["in_memory", "rocksdb"])
def store_type(request: pytest.FixtureRequest) -> str:
    return str(request.param)
