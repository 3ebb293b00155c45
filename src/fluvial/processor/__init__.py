"""The Processor API and the task runtime core that runs every topology.

User code needs :class:`Processor`, :class:`ProcessorContext`, :class:`PunctuationType` and
:class:`Stores`. :class:`StreamTask` is what runtimes (the Kafka runtime, the test driver) drive.

Imports run one way, down from the task: ``task`` imports ``nodes``, ``fusion``, ``context``,
``stores``, ``punctuation``, ``completeness``, ``collector`` and ``metrics``; ``nodes`` imports
``fusion``, which imports ``context``, and none of them imports ``task``. The contracts
(:mod:`fluvial.processor_api`) and :mod:`fluvial.topology` sit below the whole package.
"""

from fluvial.processor.collector import ConsumedRecord, RecordCollector, TaskId
from fluvial.processor.metrics import TaskMetrics
from fluvial.processor.stores import StoreBuilder, Stores
from fluvial.processor.task import StreamTask
from fluvial.processor_api import (
    Cancellable,
    Processor,
    ProcessorContext,
    ProcessorSupplier,
    PunctuationType,
)

__all__ = [
    "Cancellable",
    "ConsumedRecord",
    "Processor",
    "ProcessorContext",
    "ProcessorSupplier",
    "PunctuationType",
    "RecordCollector",
    "StoreBuilder",
    "Stores",
    "StreamTask",
    "TaskId",
    "TaskMetrics",
]
