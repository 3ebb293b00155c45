"""fluvial: Kafka Streams' design for Python — revisions, grace periods and exactly-once.

The public names users need are importable from here. The guides are in ``docs/`` (start at
``README.md``); the API reference is ``docs/reference/``, built into HTML by ``make docs``.
"""

import fluvial.startup  # noqa: F401 - first: a SIGTERM while fluvial starts exits cleanly
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
