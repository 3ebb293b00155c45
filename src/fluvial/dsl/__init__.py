"""The Streams DSL: StreamsBuilder, KStream, KTable, groupings, windows and their options."""

from fluvial.dsl.builder import StreamsBuilder
from fluvial.dsl.change import Change
from fluvial.dsl.global_table import GlobalKTable
from fluvial.dsl.grouped import KGroupedStream, TimeWindowedKStream
from fluvial.dsl.kstream import Branched, BranchedKStream, KStream
from fluvial.dsl.ktable import KGroupedTable, KTable
from fluvial.dsl.options import (
    Consumed,
    Grouped,
    Materialized,
    Named,
    Produced,
    Repartitioned,
)
from fluvial.dsl.suppressed import BufferConfig, EmitStrategy, Suppressed
from fluvial.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Change",
    "Consumed",
    "EmitStrategy",
    "GlobalKTable",
    "Grouped",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Produced",
    "Repartitioned",
    "SessionWindows",
    "SlidingWindows",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
]
