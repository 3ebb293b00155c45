"""How a slot calls its Kafka clients: retries, fencing, and a deadline on transactional calls.

A worker makes every client call that can fail in a way it must tell apart through
:class:`ClientCalls`: a retriable error is retried, fencing becomes :class:`FencedError` (the
slot stops), a missing ACL becomes the authorizer's clear error, and a transactional call that
hangs past its deadline abandons the producer so the slot restarts from its last commit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import KafkaError, KafkaException

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.kafka.security import AuthorizationError, is_secured

log = logging.getLogger(__name__)
T = TypeVar("T")

# A transactional client call still blocked after this long is taken as hung: the slot gives
# up on its producer and restarts. Broker failovers settle within seconds.
TXN_CALL_DEADLINE_S = 30.0

# Errors a coordinator gives while it moves or loads; the next attempt usually succeeds.
TRANSIENT_ERRORS = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError._TIMED_OUT,
    KafkaError.REQUEST_TIMED_OUT,
)


class FencedError(StreamsError):
    """A newer instance took over this worker's transactional id; this one must stop."""


def transactional_id(application_id: str, slot: int) -> str:
    """One transactional id per slot: whoever runs the slot next fences whoever ran it before."""
    return f"{application_id}-slot-{slot}"


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The Kafka error behind an exception, if any.

    A fatal producer error can surface from inside a delivery callback as a ``SystemError``
    whose cause is the ``KafkaException``.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KafkaException) and seen.args and isinstance(seen.args[0], KafkaError):
            return seen.args[0]
        seen = seen.__cause__ or seen.__context__
    return None


def is_fenced(error: KafkaError) -> bool:
    """A newer producer took the transactional id over. (A transactional id the principal may
    not use is no fencing: that is an authorization error, see fluvial.acls.)"""
    return error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ) or (error.fatal() and "fenced" in error.str().lower())


class ClientCalls:
    """The client calls of one slot's worker.

    ``unauthorized(failure)`` returns the clear error when a missing ACL caused ``failure``
    (see :meth:`fluvial.runtime.worker.Worker.unauthorized`), else ``None``.
    """

    def __init__(
        self,
        slot: int,
        config: StreamsConfig,
        unauthorized: Callable[[BaseException], AuthorizationError | None],
    ) -> None:
        self.slot = slot
        self.config = config
        self.unauthorized = unauthorized
        #: A bounded call is still blocked in the producer: it must never be called again.
        self.hung = False

    def bounded(self, action: Callable[[], T], what: str) -> T:
        """Run a transactional client call with a deadline of our own.

        The Kafka client can block in a transactional call far past the timeout it was given
        (seen in send offsets after the group coordinator's broker was killed and restarted,
        for good): the slot would never commit again. Past the deadline the producer is abandoned,
        never called again, and the slot restarts from the last commit; the new producer's
        init_transactions fences the abandoned one and aborts its transaction.
        """
        outcome: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                outcome.append(action())
            except BaseException as exc:
                failure.append(exc)

        helper = threading.Thread(target=run, name=f"fluvial-slot-{self.slot}-txn", daemon=True)
        helper.start()
        helper.join(TXN_CALL_DEADLINE_S)
        if helper.is_alive():
            self.hung = True
            raise StreamsError(
                f"{what} did not return within {TXN_CALL_DEADLINE_S:g} s; slot {self.slot} "
                "drops its producer and open transaction and restarts from the last commit"
            )
        if failure:
            raise failure[0]
        return outcome[0]

    def call(self, action: Callable[[], T], what: str) -> T:
        """Run a client call: retry what is retriable, turn fencing into :class:`FencedError`."""
        for attempt in range(5):
            try:
                return action()
            except (KafkaException, SystemError) as exc:
                found = kafka_error_of(exc)
                if found is None:
                    raise
                error: KafkaError = found
                if is_fenced(error):
                    raise FencedError(
                        f"slot {self.slot} was fenced during {what}: a newer instance runs its "
                        "tasks now, so this one stops and its open transaction is discarded"
                    ) from exc
                if (error.retriable() or error.code() in TRANSIENT_ERRORS) and attempt < 4:
                    if error.code() == KafkaError._TIMED_OUT and is_secured(
                        self.config.client_config
                    ):
                        # A missing ACL can look like a timeout: never retry one for minutes.
                        denied = self.unauthorized(exc)
                        if denied is not None:
                            raise denied from exc
                    log.warning("%s failed (%s); retrying", what, error.str())
                    time.sleep(0.2 * (attempt + 1))
                    continue
                if self.config.exactly_once and error.txn_requires_abort():
                    raise StreamsError(
                        f"{what} failed and the transaction was aborted: {error.str()}"
                    ) from exc
                raise StreamsError(f"{what} failed: {error.str()}") from exc
        raise AssertionError("unreachable")
