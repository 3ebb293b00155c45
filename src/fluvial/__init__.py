"""fluvial: Kafka Streams' design for Python — revisions, grace periods and exactly-once.

The public names users need are importable from here. The guides are in ``docs/`` (start at
``README.md``); the API reference is ``docs/reference/``, built into HTML by ``make docs``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

import fluvial.startup  # noqa: F401 - first: a SIGTERM while fluvial starts exits cleanly
from fluvial.compiled import check as _check_compiled_engine

# Before any compiled module loads: an edited or missing build makes their sources load instead.
_check_compiled_engine()

if TYPE_CHECKING:
    from fluvial import serdes
    from fluvial.config import StreamsConfig
    from fluvial.dsl import (
        Branched,
        BufferConfig,
        Consumed,
        EmitStrategy,
        GlobalKTable,
        Grouped,
        Joined,
        JoinWindows,
        KStream,
        KTable,
        Materialized,
        Named,
        Produced,
        Repartitioned,
        SessionWindows,
        SlidingWindows,
        StreamJoined,
        StreamsBuilder,
        Suppressed,
        TimeWindows,
    )
    from fluvial.processor import Processor, ProcessorContext, PunctuationType, Stores
    from fluvial.records import KeyValue, Record, Window, Windowed
    from fluvial.topology import Topology

# Each public name is imported on its first use: every ``fluvial`` command, sink, reader and
# worker process imports this package, and most of them never build a topology.
_WHERE = {
    "serdes": "fluvial.serdes",
    "StreamsConfig": "fluvial.config",
    "Branched": "fluvial.dsl",
    "BufferConfig": "fluvial.dsl",
    "Consumed": "fluvial.dsl",
    "EmitStrategy": "fluvial.dsl",
    "GlobalKTable": "fluvial.dsl",
    "Grouped": "fluvial.dsl",
    "Joined": "fluvial.dsl",
    "JoinWindows": "fluvial.dsl",
    "KStream": "fluvial.dsl",
    "KTable": "fluvial.dsl",
    "Materialized": "fluvial.dsl",
    "Named": "fluvial.dsl",
    "Produced": "fluvial.dsl",
    "Repartitioned": "fluvial.dsl",
    "SessionWindows": "fluvial.dsl",
    "SlidingWindows": "fluvial.dsl",
    "StreamJoined": "fluvial.dsl",
    "StreamsBuilder": "fluvial.dsl",
    "Suppressed": "fluvial.dsl",
    "TimeWindows": "fluvial.dsl",
    "Processor": "fluvial.processor",
    "ProcessorContext": "fluvial.processor",
    "PunctuationType": "fluvial.processor",
    "Stores": "fluvial.processor",
    "KeyValue": "fluvial.records",
    "Record": "fluvial.records",
    "Window": "fluvial.records",
    "Windowed": "fluvial.records",
    "Topology": "fluvial.topology",
}

__version__ = "0.1.0"

__all__ = [
    "Branched",
    "BufferConfig",
    "Consumed",
    "EmitStrategy",
    "GlobalKTable",
    "Grouped",
    "Joined",
    "JoinWindows",
    "KStream",
    "KTable",
    "KeyValue",
    "Materialized",
    "Named",
    "Processor",
    "ProcessorContext",
    "Produced",
    "PunctuationType",
    "Record",
    "Repartitioned",
    "SessionWindows",
    "SlidingWindows",
    "Stores",
    "StreamJoined",
    "StreamsBuilder",
    "StreamsConfig",
    "Suppressed",
    "TimeWindows",
    "Topology",
    "Window",
    "Windowed",
    "__version__",
    "serdes",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'fluvial' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if name == "serdes" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
