"""Versioned key-value stores (KIP-889 semantics): every key keeps its history of values.

A versioned table answers "what was the value of k as of time t?", which is what a stream-table
join needs when the stream record is older than the table's latest update. Each put adds a
*version* (value, timestamp); a version is valid from its timestamp until the timestamp of the
next version of the key (``valid_to``, exclusive), or forever if it is the latest. A ``None``
value is a tombstone version: the key is absent from that time on.

Retention: stream time here is the largest put timestamp seen. History is kept for
``history_retention_ms`` behind it; let ``cutoff = observed_stream_time - history_retention_ms``.

- A put with ``timestamp < cutoff`` is refused: :data:`PUT_RETURN_CODE_NOT_PUT`, no write and no
  changelog record (restoring the changelog would refuse it too).
- ``get(key, as_of)`` with ``as_of < cutoff`` answers only from the latest version (the latest
  version of a key never expires); anything older is reported absent, whether or not its bytes
  are still around, so answers do not depend on when cleanup ran.
- Versions whose ``valid_to <= cutoff``, and latest tombstones older than the cutoff, can no
  longer be observed and are reclaimed.

Put return codes (Kafka Streams' values): the ``valid_to`` of the version just put when a newer
version exists (an out-of-order put), :data:`PUT_RETURN_CODE_VALID_TO_UNDEFINED` (``-1``) when
it is the latest, and :data:`PUT_RETURN_CODE_NOT_PUT` (``-2**63``) when refused. Timestamps must be
non-negative (as Kafka record timestamps are), which keeps ``-1`` unambiguous.

The changelog carries plain values keyed by the plain key, stamped with the version timestamp, as
Kafka Streams' versioned changelog does; replaying it in order rebuilds the same history.
"""

from __future__ import annotations

import bisect
import heapq
from abc import abstractmethod
from collections.abc import Iterable
from pathlib import Path
from typing import Generic, NamedTuple, TypeVar

from fluvial.state.base import ChangelogRecord, StateStore

V = TypeVar("V")

PUT_RETURN_CODE_VALID_TO_UNDEFINED = -1
PUT_RETURN_CODE_NOT_PUT = -(2**63)

_NO_TIME = -(2**63)


class VersionedRecord(NamedTuple, Generic[V]):
    """One version: its value, the timestamp it became valid and when it stopped being valid.

    ``valid_to_ms`` is exclusive; ``None`` means the version is still the latest.
    """

    value: V
    timestamp_ms: int
    valid_to_ms: int | None = None


#: (timestamp, value or None for a tombstone) of one stored version
Version = tuple[int, bytes | None]


class VersionedKeyValueStore(StateStore):
    """The versioned store contract, identical on every backend."""

    def __init__(self, name: str, persistent: bool, history_retention_ms: int) -> None:
        super().__init__(name, persistent)
        if history_retention_ms < 0:
            raise ValueError(
                f"versioned store {name!r}: history_retention_ms must be >= 0, "
                f"got {history_retention_ms}"
            )
        self.history_retention_ms = history_retention_ms
        self.observed_stream_time = _NO_TIME

    # -- writes ------------------------------------------------------------------------------

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int) -> int:
        """Add a version (``None``: a tombstone); return its ``valid_to`` or a return code."""
        self._check_open()
        _check_timestamp(self.name, timestamp_ms)
        if timestamp_ms < self.history_cutoff():
            return PUT_RETURN_CODE_NOT_PUT
        newer = self._next_after(key, timestamp_ms)
        self.observed_stream_time = max(self.observed_stream_time, timestamp_ms)
        self._write_versions([(key, timestamp_ms, value)])
        self._log(key, value, timestamp_ms)
        return PUT_RETURN_CODE_VALID_TO_UNDEFINED if newer is None else newer

    def delete(self, key: bytes, timestamp_ms: int) -> VersionedRecord[bytes] | None:
        """Put a tombstone at ``timestamp_ms``; return the version that was valid then, if any."""
        existing = self.get(key, timestamp_ms)
        self.put(key, None, timestamp_ms)
        return existing

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._check_open()
        self._write_versions(self._admit(records))

    def _admit(self, records: Iterable[ChangelogRecord]) -> list[tuple[bytes, int, bytes | None]]:
        """The records a sequence of puts would accept, advancing stream time as puts would."""
        admitted = []
        for record in records:
            _check_timestamp(self.name, record.timestamp_ms)
            if record.timestamp_ms < self.history_cutoff():
                continue
            self.observed_stream_time = max(self.observed_stream_time, record.timestamp_ms)
            admitted.append((record.key, record.timestamp_ms, record.value))
        return admitted

    # -- reads -------------------------------------------------------------------------------

    def get(
        self, key: bytes, as_of_timestamp_ms: int | None = None
    ) -> VersionedRecord[bytes] | None:
        """The latest version, or (with ``as_of_timestamp_ms``) the one valid at that time.

        ``None`` when there is no such version, when it is a tombstone, or when ``as_of`` is
        older than the history retention and the latest version started after it.
        """
        self._check_open()
        if as_of_timestamp_ms is None:
            latest = self._latest(key)
            if latest is None or latest[1] is None:
                return None
            return VersionedRecord(latest[1], latest[0], None)
        if as_of_timestamp_ms < self.history_cutoff():
            latest = self._latest(key)
            if latest is not None and latest[1] is not None and latest[0] <= as_of_timestamp_ms:
                return VersionedRecord(latest[1], latest[0], None)
            return None
        found = self._floor(key, as_of_timestamp_ms)
        if found is None or found[1] is None:
            return None
        return VersionedRecord(found[1], found[0], self._next_after(key, found[0]))

    def history_cutoff(self) -> int:
        """Versions valid only before this time are out of history retention."""
        if self.observed_stream_time == _NO_TIME:
            return _NO_TIME
        return self.observed_stream_time - self.history_retention_ms

    # -- backend hooks -------------------------------------------------------------------------

    @abstractmethod
    def _floor(self, key: bytes, timestamp_ms: int) -> Version | None:
        """The version of ``key`` with the largest timestamp ``<= timestamp_ms``."""

    @abstractmethod
    def _next_after(self, key: bytes, timestamp_ms: int) -> int | None:
        """The smallest version timestamp of ``key`` that is ``> timestamp_ms``."""

    @abstractmethod
    def _latest(self, key: bytes) -> Version | None:
        """The newest version of ``key``, tombstone or not."""

    @abstractmethod
    def _write_versions(self, versions: list[tuple[bytes, int, bytes | None]]) -> None:
        """Store versions (replacing equal timestamps) and the current stream time; reclaim."""


def _check_timestamp(name: str, timestamp_ms: int) -> None:
    if timestamp_ms < 0:
        raise ValueError(
            f"versioned store {name!r}: timestamps must be >= 0, got {timestamp_ms} "
            "(Kafka record timestamps are never negative)"
        )


def prunable(times: list[int], values: list[bytes | None], cutoff: int) -> int:
    """How many of a key's oldest versions (sorted by time) can no longer be observed.

    Every version whose successor starts at or before the cutoff; and if that leaves only the
    latest, a tombstone older than the cutoff too (a key that is gone and long gone).
    """
    dead = bisect.bisect_right(times, cutoff) - 1  # versions before the last one <= cutoff
    dead = max(dead, 0)
    if dead == len(times) - 1 and values[-1] is None and times[-1] <= cutoff:
        dead = len(times)
    return dead


class InMemoryVersionedKeyValueStore(VersionedKeyValueStore):
    """Per key, versions in two parallel sorted lists; a heap says which keys to reclaim when."""

    def __init__(self, name: str, history_retention_ms: int) -> None:
        super().__init__(name, False, history_retention_ms)
        self._times: dict[bytes, list[int]] = {}
        self._values: dict[bytes, list[bytes | None]] = {}
        # (time, key): once the cutoff passes ``time``, ``key`` may have reclaimable versions.
        self._reclaim: list[tuple[int, bytes]] = []
        self._open = False

    @property
    def is_open(self) -> bool:
        return self._open

    def init(self, state_dir: Path | None = None) -> None:
        self._open = True

    def flush(self) -> None:
        """Nothing to do: the changelog is an in-memory store's only durability."""

    def close(self) -> None:
        self._open = False

    def destroy(self) -> None:
        self.close()
        self._times.clear()
        self._values.clear()
        self._reclaim.clear()
        self.committed_offset = None
        self.observed_stream_time = _NO_TIME

    def approximate_num_entries(self) -> int:
        """Stored versions, tombstones included."""
        return sum(len(times) for times in self._times.values())

    def _floor(self, key: bytes, timestamp_ms: int) -> Version | None:
        times = self._times.get(key)
        if not times:
            return None
        i = bisect.bisect_right(times, timestamp_ms) - 1
        return None if i < 0 else (times[i], self._values[key][i])

    def _next_after(self, key: bytes, timestamp_ms: int) -> int | None:
        times = self._times.get(key)
        if not times:
            return None
        i = bisect.bisect_right(times, timestamp_ms)
        return times[i] if i < len(times) else None

    def _latest(self, key: bytes) -> Version | None:
        times = self._times.get(key)
        return (times[-1], self._values[key][-1]) if times else None

    def _write_versions(self, versions: list[tuple[bytes, int, bytes | None]]) -> None:
        for key, timestamp_ms, value in versions:
            times = self._times.setdefault(key, [])
            values = self._values.setdefault(key, [])
            i = bisect.bisect_left(times, timestamp_ms)
            stored = None if value is None else bytes(value)
            if i < len(times) and times[i] == timestamp_ms:
                values[i] = stored
            else:
                times.insert(i, timestamp_ms)
                values.insert(i, stored)
            # This version ends its predecessor's validity (and, as a tombstone, the key's).
            heapq.heappush(self._reclaim, (timestamp_ms, key))
        cutoff = self.history_cutoff()
        while self._reclaim and self._reclaim[0][0] <= cutoff:
            _, key = heapq.heappop(self._reclaim)
            kept = self._times.get(key)
            if not kept:
                continue  # a stale entry: the key was reclaimed already
            dead = prunable(kept, self._values[key], cutoff)
            if dead == len(kept):
                del self._times[key], self._values[key]
            elif dead:
                del kept[:dead], self._values[key][:dead]
