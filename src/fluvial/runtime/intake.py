"""The worker's intake: one consumer poll's messages, as each task partition's records.

It runs once per consumed record, so it is compiled: one of :data:`fluvial.compiled.MODULES`,
built with mypyc at install (interpreted without a C compiler). It calls no user code.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from fluvial.acls import AUTHORIZATION_ERRORS
from fluvial.errors import StreamsError
from fluvial.processor.collector import ConsumedRecord
from fluvial.state.base import new_tuple

log = logging.getLogger("fluvial.runtime.worker")

_PARTITION_EOF: int = KafkaError._PARTITION_EOF

Batches = dict[tuple[str, int], list[ConsumedRecord]]


def group_by_partition(
    messages: Sequence[Any], assigned: Container[tuple[str, int]]
) -> tuple[Batches, list[tuple[str, int, int]]]:
    """The records of ``messages`` per ``(topic, partition)`` of ``assigned``, each list in
    offset order, and the ``(topic, partition, offset)`` of each end-of-partition event.

    Records of partitions not in ``assigned`` (a poll that raced a revocation) are left out.
    A fatal error raises :class:`~fluvial.errors.StreamsError`, a missing authorization
    raises :class:`~confluent_kafka.KafkaException` (the consumer never retries one), and
    other errors are logged: the consumer retries them itself.
    """
    batches: Batches = {}
    at_end: list[tuple[str, int, int]] = []
    for msg in messages:
        error = msg.error()
        if error is not None:
            if error.code() == _PARTITION_EOF:
                at_end.append((msg.topic(), msg.partition(), msg.offset()))
                continue
            if error.fatal():
                raise StreamsError(f"the consumer failed: {error.str()}")
            if error.name() in AUTHORIZATION_ERRORS:
                # Never retried by the consumer: left alone, the slot would wait for ever.
                raise KafkaException(error)
            log.warning("consumer: %s", error.str())
            continue
        tp = (msg.topic(), msg.partition())
        batch = batches.get(tp)
        if batch is None:
            if tp not in assigned:
                continue
            batch = batches[tp] = []
        timestamp: int = msg.timestamp()[1]
        fields = (msg.key(), msg.value(), timestamp, msg.offset(), msg.headers() or ())
        batch.append(new_tuple(ConsumedRecord, fields))
    return batches, at_end
