"""Drivers that a cluster manager restarts, and slot errors that no retry can mend.

The Spark engine's side of :mod:`fluvial.runtime.epoch`:

- On the driver, :class:`LeaseFencing` claims the application's epoch before Spark starts
  (fencing an older driver and every slot id it may use), records each slot layout's count,
  proves the epoch before every lease, and fences every slot again when the layout changes.
- In a slot task, :func:`check_current_driver` stops a task whose driver is no longer the
  current one *before* it fences its slot and again after: a task of an older driver (a retry
  Spark runs for it after it was resumed) would otherwise take the slot back from the newer
  driver's task, lease after lease.
- A slot error that no retry can mend (a missing ACL, a newer driver) comes back as the
  task's result instead of failing the task: Spark would retry a failed task three more
  times, and the driver would run failed leases again, for minutes, before giving up.
  :func:`fatal_error` finds it on the driver, which stops.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

from fluvial.acls import authorization_error
from fluvial.config import StreamsConfig
from fluvial.errors import CoPartitioningError, FluvialError
from fluvial.kafka.security import AuthorizationError
from fluvial.runtime.client_calls import FencedError, is_fenced, kafka_error_of
from fluvial.runtime.epoch import (
    DriverEpoch,
    DriverFencedError,
    fenced_message,
    read_driver_record,
)
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)


class LeaseFencing:
    """The driver's epoch, as the Spark engine's lease loop uses it (exactly-once only)."""

    def __init__(self, topology: Topology, config: StreamsConfig, run_id: str) -> None:
        self.epoch = DriverEpoch(topology, config, run_id) if config.exactly_once else None

    def claim(self) -> None:
        """Take the application over from any earlier driver, before Spark starts: its slots
        are fenced at once, and a missing ACL for the transactional ids shows here."""
        if self.epoch is not None:
            self.epoch.claim(0)

    def layout(self, slots: int, *, initial: bool) -> None:
        """Before a slot layout's first lease: record the slot count; on a change, fence."""
        if self.epoch is None:
            return
        # A count larger than any before is recorded before any slot of it runs, so that a
        # later driver fences those slots too.
        self.epoch.check(slots)
        if not initial:
            # Tasks move between slots: fence every old holder before any new one starts, so
            # no zombie of the old layout commits for a task that moved.
            self.epoch.fence_slots()

    def before_lease(self, slots: int) -> None:
        """Raise :class:`DriverFencedError` if a newer driver took the application over."""
        if self.epoch is None:
            return
        try:
            self.epoch.check(slots)
        except (DriverFencedError, AuthorizationError):
            raise
        except Exception as error:  # noqa: BLE001 - a broker away: the slots' ids still fence
            log.warning("could not check the driver epoch before the lease: %s", error)

    def close(self) -> None:
        if self.epoch is not None:
            self.epoch.close()


def check_current_driver(run_id: str, topology: Topology, config: StreamsConfig) -> None:
    """Raise :class:`DriverFencedError` if the driver of run ``run_id`` is not the current one."""
    if not config.exactly_once:
        return
    record = read_driver_record(topology, config)
    if record is not None and record.run_id != run_id:
        raise DriverFencedError(fenced_message(config.application_id, run_id, record))


def fatal_slot_error(
    run_id: str, topology: Topology, config: StreamsConfig, failure: BaseException
) -> FluvialError | None:
    """The error to stop the application with, if ``failure`` is one no retry can mend."""
    if not isinstance(failure, Exception):
        return None
    if isinstance(failure, (AuthorizationError, DriverFencedError, CoPartitioningError)):
        return failure
    error = kafka_error_of(failure)
    if isinstance(failure, FencedError) or (error is not None and is_fenced(error)):
        # Fenced by a newer attempt of this driver's own task (Spark retries it as usual), or
        # by a newer driver: then this whole driver is done.
        try:
            check_current_driver(run_id, topology, config)
        except DriverFencedError as newer:
            return newer
        except Exception:  # noqa: BLE001 - unknown: let Spark retry, the retry checks again
            return None
        return None
    return authorization_error(topology, config, failure)


class _Reported(Protocol):
    slot: int
    fatal: Exception | None


def fatal_error(results: Iterable[_Reported]) -> Exception | None:
    """The first error a slot task of a lease reported as fatal, if any."""
    for result in sorted(results, key=lambda r: r.slot):
        if result.fatal is not None:
            return result.fatal
    return None
