"""The local Apache Kafka that fluvial provisions for development and tests.

The names below are imported on first use: every ``fluvial`` command imports this package for
its topic tools, and most never start a broker.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fluvial.kafka.local import KAFKA_VERSION, LocalKafka, default_data_dir, free_port

_WHERE = {
    "KAFKA_VERSION": "fluvial.kafka.local",
    "LocalKafka": "fluvial.kafka.local",
    "default_data_dir": "fluvial.kafka.local",
    "free_port": "fluvial.kafka.local",
}

__all__ = ["KAFKA_VERSION", "LocalKafka", "default_data_dir", "free_port"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fluvial.kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
