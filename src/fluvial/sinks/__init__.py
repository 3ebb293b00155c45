"""Exactly-once egress: fluvial's topics into databases.

:class:`PostgresSink` writes topics into a PostgreSQL table, rows and consumed offsets in one
transaction, and fences stale instances with an epoch in its offsets table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluvial.sinks.postgres import PostgresSink, SinkProgress
    from fluvial.sinks.store import BadRowError, SinkFencedError

__all__ = ["BadRowError", "PostgresSink", "SinkFencedError", "SinkProgress"]

_WHERE = {
    "PostgresSink": "fluvial.sinks.postgres",
    "SinkProgress": "fluvial.sinks.postgres",
    "BadRowError": "fluvial.sinks.store",
    "SinkFencedError": "fluvial.sinks.store",
}


def __getattr__(name: str) -> Any:
    # Imported on first use: the driver (psycopg) takes a while to load, and every
    # `fluvial` command imports this package for its `sink` sub-command.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'fluvial.sinks' has no attribute {name!r}")
