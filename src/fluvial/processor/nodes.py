"""The processors a task puts at the edges of its graph: sources and sinks.

Sources receive already-deserialized records (the task deserializes, so that it can apply the
deserialization error policy) and pass them on. Sinks serialize and hand bytes to the collector.

Compiled: one of :data:`fluvial.compiled.MODULES`, built with mypyc at install (interpreted
without a C compiler). It calls user code in the sinks' serdes and stream partitioners.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from fluvial import serdes
from fluvial.errors import SerializationError
from fluvial.partitioner import default_partition
from fluvial.processor.collector import RecordCollector
from fluvial.processor.completeness import WRITER_HEADER
from fluvial.processor.fusion import FusableProcessor, Step
from fluvial.processor.metrics import RECORDS_PRODUCED
from fluvial.records import Record, Windowed
from fluvial.serdes import Serde
from fluvial.topology.nodes import StreamPartitioner


class SourceProcessor(FusableProcessor):
    def fuse(self, downstream: Step) -> Step:
        return downstream


class SinkProcessor(FusableProcessor):
    """Serializes with the sink's serdes, or by the Python type when none was given."""

    def __init__(
        self,
        topic: str,
        key_serde: Serde[Any] | None,
        value_serde: Serde[Any] | None,
        collector: RecordCollector,
        partitioner: StreamPartitioner | None,
        count_metric: bool,
        writer_id: str | None = None,
        origin: Callable[[], tuple[str, bytes] | None] | None = None,
    ) -> None:
        """``writer_id``: added as a header to every record, for a repartition topic read
        merged by writer downstream (:mod:`fluvial.processor.completeness`). ``origin``: for a
        repartition topic, gives the header naming the user's record in process
        (:data:`~fluvial.processor.collector.ORIGIN_HEADER`)."""
        self.topic = topic
        self.origin = origin
        self.writer_header = (WRITER_HEADER, writer_id.encode()) if writer_id else None
        self.key_serde = key_serde
        self.value_serde = value_serde
        self.collector = collector
        self.partitioner = partitioner
        self.count_metric = count_metric

    def init(self, context: Any) -> None:
        super().init(context)
        # A plain int, registered with the task's metrics: cheaper than a named increment.
        self.produced = 0
        if self.count_metric:
            context.metrics.register(RECORDS_PRODUCED, lambda: self.produced)

    def fuse(self, downstream: Step) -> Step:
        topic, partitioner, send = self.topic, self.partitioner, self.collector.send
        if partitioner is None:
            partitioner = windowed_partitioner(self.key_serde, self.collector)
        key_serde, value_serde = self.key_serde, self.value_serde
        inferred = _INFERRED_BY_TYPE
        writer = self.writer_header
        origin_of = self.origin

        def sink(key: Any, value: Any, origin: Record[Any, Any]) -> None:
            # Without a serde, the one for the object's type (looked up here: once per record).
            serde = key_serde or inferred.get(type(key))
            key_bytes = (
                _serialize(None, topic, key, "key") if serde is None
                else serde.serialize(topic, key)
            )  # fmt: skip
            serde = value_serde or inferred.get(type(value))
            value_bytes = (
                _serialize(None, topic, value, "value") if serde is None
                else serde.serialize(topic, value)
            )  # fmt: skip
            partition = None if partitioner is None else partitioner(topic, key, value, -1)
            headers = origin.headers
            out = list(headers) if headers else []
            if writer is not None:
                out.append(writer)
            if origin_of is not None:
                origin_header = origin_of()
                if origin_header is not None:
                    out.append(origin_header)
            send(topic, key_bytes, value_bytes, origin.timestamp_ms, out, partition)
            self.produced += 1

        return sink

    def windowed_writer(self, key_serde: Serde[Any]) -> WindowedWriter | None:
        """This sink's work on a windowed aggregate's result that reaches it through
        ``to_stream`` alone, without the windowed key object.

        ``write(key, key_bytes, window_start_ms, value, timestamp_ms)`` sends what the sink sends
        for ``Windowed(key, window)`` and ``value`` at that timestamp, where ``key_bytes`` are
        ``key_serde``'s bytes of ``key`` (reused when the sink's inner key serde writes the
        same): the same key bytes, value bytes, partition and (no) headers. ``None`` unless the
        sink's key serde is time-windowed over a built-in serde and the placement is the sink's
        own (no partitioner of the user's, no writer header).
        """
        inner = serdes.builtin_time_windowed_inner(self.key_serde)
        if inner is None or self.partitioner is not None or self.writer_header is not None:
            return None
        reuse = serdes.same_bytes(inner, key_serde)
        topic, send, value_serde = self.topic, self.collector.send, self.value_serde
        count = getattr(self.collector, "partition_count", None)
        pack = _WINDOW_START.pack
        inferred = _INFERRED_BY_TYPE

        def write(key: Any, key_bytes: bytes, start_ms: int, value: Any, timestamp_ms: int) -> None:
            inner_bytes = key_bytes if reuse else inner.serialize(topic, key)
            assert inner_bytes is not None  # a built-in serde gives None for a None key only
            serde = value_serde or inferred.get(type(value))
            value_bytes = (
                _serialize(None, topic, value, "value") if serde is None
                else serde.serialize(topic, value)
            )  # fmt: skip
            # Placed by the inner key's bytes, as windowed_partitioner places them.
            partitions = None if count is None else count(topic)
            partition = default_partition(inner_bytes, partitions) if partitions else None
            send(topic, inner_bytes + pack(start_ms), value_bytes, timestamp_ms, [], partition)
            self.produced += 1

        return write


WindowedWriter = Callable[[Any, bytes, int, Any, int], None]
"""``(key, key_bytes, window_start_ms, value, timestamp_ms)``: see
:meth:`SinkProcessor.windowed_writer`."""

_WINDOW_START = struct.Struct(">q")


def windowed_partitioner(
    key_serde: Serde[Any] | None, collector: RecordCollector
) -> StreamPartitioner | None:
    """For windowed keys, Kafka Streams' placement: by the inner key's bytes alone, so every
    window of a key lands on that key's partition (as a Java consumer of the output expects).
    ``None`` (the producer hashes the whole key) when the collector cannot count partitions."""
    inner = getattr(key_serde, "windowed_inner", None)
    count = getattr(collector, "partition_count", None)
    if inner is None or count is None:
        return None

    def by_inner_key(topic: str, key: Any, value: Any, _num_partitions: int) -> int | None:
        partitions = count(topic)
        data = None if key is None else inner.serialize(topic, key.key)
        if not partitions or data is None:
            return None
        return default_partition(data, partitions)

    return by_inner_key


# Inferred serdes by exact type, for the types whose serde depends on the type alone (not
# Windowed, whose serde depends on the window size and the inner key).
_INFERRED_BY_TYPE: dict[type, Serde[Any]] = {}


def _serialize(serde: Serde[Any] | None, topic: str, obj: Any, what: str) -> bytes | None:
    if serde is not None:
        return serde.serialize(topic, obj)
    inferred = _INFERRED_BY_TYPE.get(type(obj))
    if inferred is None:
        inferred = inferred_serde(obj, topic, what)
        if not isinstance(obj, Windowed):
            _INFERRED_BY_TYPE[type(obj)] = inferred
    return inferred.serialize(topic, obj)


def inferred_serde(obj: Any, topic: str, what: str) -> Serde[Any]:
    """The built-in serde matching ``obj``'s type, for sinks given no serde.

    Types map to the Kafka Streams-compatible formats: str → UTF-8, int → 8-byte long,
    float → double, bytes → raw, Windowed → inner key + 8-byte window start, None → null,
    dicts and lists → JSON.
    """
    if obj is None or isinstance(obj, bytes | bytearray):
        return serdes.bytes_()
    if isinstance(obj, str):
        return serdes.string()
    if isinstance(obj, bool):
        return serdes.json()
    if isinstance(obj, int):
        return serdes.long()
    if isinstance(obj, float):
        return serdes.double()
    if isinstance(obj, Windowed):
        size = max(1, obj.window.end_ms - obj.window.start_ms)
        return serdes.time_windowed(inferred_serde(obj.key, topic, what), size)
    if isinstance(obj, dict | list | tuple):
        return serdes.json()
    raise SerializationError(
        f"no {what} serde for topic {topic!r} and a {type(obj).__name__} cannot be inferred: "
        f"pass {what}_serde=... to to()/Produced"
    )
