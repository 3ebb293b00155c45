"""The Streams DSL: StreamsBuilder, KStream, KTable, groupings, windows and their options."""

from fluvial.dsl.builder import StreamsBuilder
from fluvial.dsl.change import Change
from fluvial.dsl.cogroup import CogroupedKStream
from fluvial.dsl.global_table import GlobalKTable
from fluvial.dsl.grouped import KGroupedStream, TimeWindowedKStream
from fluvial.dsl.kstream import Branched, BranchedKStream, KStream
from fluvial.dsl.ktable import KGroupedTable, KTable
from fluvial.dsl.options import (
    Consumed,
    Grouped,
    Joined,
    Materialized,
    Named,
    Produced,
    Repartitioned,
    StreamJoined,
)
from fluvial.dsl.session import SessionWindowedKStream
from fluvial.dsl.suppressed import BufferConfig, EmitStrategy, Suppressed
from fluvial.dsl.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Change",
    "CogroupedKStream",
    "Consumed",
    "EmitStrategy",
    "GlobalKTable",
    "Grouped",
    "Joined",
    "JoinWindows",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Produced",
    "Repartitioned",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindows",
    "StreamJoined",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
]
