"""The records a consumer returns, typed as librdkafka fills them.

confluent-kafka types one ``Message`` for what a producer sends and what a consumer returns,
so each of its fields may be ``None``. A record a consumer returns without an error always has
its topic, partition and offset, and its headers are ``None`` or a list of ``(name, bytes or
None)`` pairs; a partition-EOF event has its topic, partition and offset too. Other error
events may lack them: check before use.

:func:`consume` hands out a batch under that type: one cast per batch, nothing per record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError


class ConsumedMessage(Protocol):
    """A record (or an event) as :func:`consume` returns it."""

    def error(self) -> KafkaError | None: ...

    def topic(self) -> str: ...

    def partition(self) -> int: ...

    def offset(self) -> int: ...

    def key(self) -> bytes | None: ...

    def value(self) -> bytes | None: ...

    def headers(self) -> list[tuple[str, bytes | None]] | None: ...

    def timestamp(self) -> tuple[int, int]: ...


def consume(consumer: Consumer, num_messages: int, timeout_s: float) -> list[ConsumedMessage]:
    """``consumer.consume(num_messages, timeout_s)``, typed as what it returns."""
    return cast("list[ConsumedMessage]", consumer.consume(num_messages, timeout_s))
