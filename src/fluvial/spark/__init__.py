"""Everything Spark in fluvial: the session helper, the engine, the exactly-once Structured
Streaming sinks (to Kafka and to PostgreSQL) and the DataFrame readers of fluvial's tables.

The names below are imported on first use: the engine's driver and every executor's Python
daemon import this package, and neither needs the sinks' clients (psycopg) to start.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluvial.spark.postgres import PostgresBatchResult, PostgresSink
    from fluvial.spark.readers import read_table, read_windowed
    from fluvial.spark.session import local_spark_session
    from fluvial.spark.sink import BatchMarker, BatchResult, KafkaSink, SinkError

_WHERE = {
    "BatchMarker": "fluvial.spark.sink",
    "BatchResult": "fluvial.spark.sink",
    "KafkaSink": "fluvial.spark.sink",
    "PostgresBatchResult": "fluvial.spark.postgres",
    "PostgresSink": "fluvial.spark.postgres",
    "SinkError": "fluvial.spark.sink",
    "local_spark_session": "fluvial.spark.session",
    "read_table": "fluvial.spark.readers",
    "read_windowed": "fluvial.spark.readers",
}

__all__ = [
    "BatchMarker",
    "BatchResult",
    "KafkaSink",
    "PostgresBatchResult",
    "PostgresSink",
    "SinkError",
    "local_spark_session",
    "read_table",
    "read_windowed",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fluvial.spark' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
