"""Exactly-once egress: fluvial's topics into databases.

:class:`PostgresSink` writes topics into a PostgreSQL table, rows and consumed offsets in one
transaction, and fences stale instances with an epoch in its offsets table.
"""

from fluvial.sinks.postgres import PostgresSink, SinkProgress
from fluvial.sinks.store import BadRowError, SinkFencedError

__all__ = ["BadRowError", "PostgresSink", "SinkFencedError", "SinkProgress"]
