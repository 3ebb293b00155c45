"""Session stores: values keyed by (key, session start, session end), kept for a retention period.

A session aggregation keeps one entry per live session of a key. When a record arrives, the
processor looks up the sessions it could join with :meth:`SessionStore.find_sessions`, removes
the ones it merges and puts the merged session. Sessions are identified by both bounds, since
merging changes them.

The store key, and the changelog key, is Kafka Streams' session key layout:
``key bytes + 8-byte BE session end + 8-byte BE session start``. End comes first so that a
changelog consumer (and a RocksDB segment, which is chosen by end time) reads sessions of one key
in end-time order.

Retention runs against the *session end*: stream time here is the largest session end ever put,
and a session whose end is at or before ``observed_stream_time - retention_ms`` is expired. Puts
of expired sessions are dropped (and not logged), reads skip them, and their storage is reclaimed.
"""

from __future__ import annotations

import bisect
import struct
from abc import abstractmethod
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from fluvial.state.base import ChangelogRecord, StateStore

_LONG = struct.Struct(">q")

#: Bytes a session store key carries after the record key: 8-byte end, 8-byte start.
SESSION_KEY_SUFFIX = 16

MIN_TIME = -(2**63)
MAX_TIME = 2**63 - 1


class SessionEntry(NamedTuple):
    """One stored session: its key, both (inclusive) bounds and the aggregate bytes."""

    key: bytes
    start_ms: int
    end_ms: int
    value: bytes


def session_store_key(key: bytes, session_start_ms: int, session_end_ms: int) -> bytes:
    """Key bytes + 8-byte BE end + 8-byte BE start (Kafka Streams' session key layout)."""
    return key + _LONG.pack(session_end_ms) + _LONG.pack(session_start_ms)


def parse_session_store_key(binary: bytes) -> tuple[bytes, int, int]:
    """Split a session store key back into (key, session start, session end)."""
    if len(binary) < SESSION_KEY_SUFFIX:
        raise ValueError(
            f"a session store key has at least {SESSION_KEY_SUFFIX} bytes, got {len(binary)}"
        )
    end = _LONG.unpack_from(binary, len(binary) - 16)[0]
    start = _LONG.unpack_from(binary, len(binary) - 8)[0]
    return binary[:-SESSION_KEY_SUFFIX], start, end


class SessionStore(StateStore):
    """The session store contract, identical on every backend.

    Orders: the one-key reads (:meth:`find_sessions`, :meth:`fetch`) answer ascending by
    (end, start); the key-range reads ascending by (end, key, start), keys in unsigned byte order.
    """

    def __init__(self, name: str, persistent: bool, retention_ms: int) -> None:
        super().__init__(name, persistent)
        if retention_ms < 0:
            raise ValueError(
                f"session store {name!r}: retention_ms must be >= 0, got {retention_ms}"
            )
        self.retention_ms = retention_ms
        self.observed_stream_time = MIN_TIME

    # -- writes ------------------------------------------------------------------------------

    def put(
        self,
        key: bytes,
        session_start_ms: int,
        session_end_ms: int,
        value: bytes | None,
        timestamp_ms: int | None = None,
    ) -> None:
        """Store the aggregate of one session; ``None`` removes the session.

        ``timestamp_ms`` stamps the changelog record; it defaults to the session end, the
        timestamp of the session's latest record.
        """
        self._check_open()
        if session_end_ms < session_start_ms:
            raise ValueError(
                f"session store {self.name!r}: session end {session_end_ms} is before its "
                f"start {session_start_ms}"
            )
        self._advance(session_end_ms)
        if session_end_ms <= self.expired_before():
            return  # too late: the session is gone, and so must be its changelog record
        self._write(key, session_start_ms, session_end_ms, value)
        self._log(
            session_store_key(key, session_start_ms, session_end_ms),
            value,
            session_end_ms if timestamp_ms is None else timestamp_ms,
        )

    def remove(
        self,
        key: bytes,
        session_start_ms: int,
        session_end_ms: int,
        timestamp_ms: int | None = None,
    ) -> None:
        """Remove one session (a tombstone goes to the changelog)."""
        self.put(key, session_start_ms, session_end_ms, None, timestamp_ms)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._check_open()
        for record in records:
            key, start, end = parse_session_store_key(record.key)
            self._advance(end)
            if end > self.expired_before():
                self._write(key, start, end, record.value)
        self._after_restore()

    # -- reads -------------------------------------------------------------------------------

    @abstractmethod
    def fetch_session(self, key: bytes, session_start_ms: int, session_end_ms: int) -> bytes | None:
        """The aggregate of exactly this session, or ``None``."""

    def find_sessions(
        self, key: bytes, earliest_session_end_ms: int, latest_session_start_ms: int
    ) -> Iterator[SessionEntry]:
        """Sessions of ``key`` with ``end >= earliest_end`` and ``start <= latest_start``.

        Those are the sessions that overlap or touch ``[earliest_end, latest_start]``: exactly
        what a record at time t with inactivity gap g may merge with, for
        ``find_sessions(key, t - g, t + g)``.
        """
        self._check_open()
        return self._find(key, key, earliest_session_end_ms, latest_session_start_ms, True)

    def find_sessions_range(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_session_end_ms: int,
        latest_session_start_ms: int,
    ) -> Iterator[SessionEntry]:
        """:meth:`find_sessions` over ``key_from <= key <= key_to`` (``None`` leaves it open)."""
        self._check_open()
        return self._find(key_from, key_to, earliest_session_end_ms, latest_session_start_ms, False)

    def fetch(self, key: bytes) -> Iterator[SessionEntry]:
        """Every live session of ``key``."""
        return self.find_sessions(key, MIN_TIME, MAX_TIME)

    def fetch_range(self, key_from: bytes | None, key_to: bytes | None) -> Iterator[SessionEntry]:
        """Every live session of the keys in ``[key_from, key_to]``."""
        return self.find_sessions_range(key_from, key_to, MIN_TIME, MAX_TIME)

    def all(self) -> Iterator[SessionEntry]:
        """Every live session."""
        return self.fetch_range(None, None)

    def expired_before(self) -> int:
        """Sessions ending at or before this time are expired."""
        if self.observed_stream_time == MIN_TIME:
            return MIN_TIME
        return self.observed_stream_time - self.retention_ms

    def _live_from(self, earliest_end: int) -> int:
        return max(earliest_end, self.expired_before() + 1)

    # -- backend hooks -------------------------------------------------------------------------

    @abstractmethod
    def _write(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        """Store or (``None``) delete one session; expiry is already checked."""

    @abstractmethod
    def _advance(self, session_end_ms: int) -> None:
        """Move stream time forward to ``session_end_ms`` if later, reclaiming expired sessions."""

    @abstractmethod
    def _find(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        one_key: bool,
    ) -> Iterator[SessionEntry]:
        """Live matching sessions in the contract's order (``one_key``: key_from == key_to)."""

    def _after_restore(self) -> None:
        """Persist what a restore changed besides the data (RocksDB: nothing extra)."""


class InMemorySessionStore(SessionStore):
    """Sessions per key, plus an index by end time so that expiry never scans live sessions."""

    def __init__(self, name: str, retention_ms: int) -> None:
        super().__init__(name, False, retention_ms)
        # key -> {(end, start): value}; per-key (end, start) lists kept sorted alongside.
        self._sessions: dict[bytes, dict[tuple[int, int], bytes]] = {}
        self._order: dict[bytes, list[tuple[int, int]]] = {}
        self._keys: list[bytes] = []
        # end -> {(key, start)}: what expiry must drop when stream time passes that end.
        self._by_end: dict[int, set[tuple[bytes, int]]] = {}
        self._ends: list[int] = []
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
        for table in (self._sessions, self._order, self._by_end):
            table.clear()
        self._keys.clear()
        self._ends.clear()
        self.committed_offset = None
        self.observed_stream_time = MIN_TIME

    def approximate_num_entries(self) -> int:
        return sum(len(sessions) for sessions in self._sessions.values())

    def fetch_session(self, key: bytes, session_start_ms: int, session_end_ms: int) -> bytes | None:
        self._check_open()
        if session_end_ms <= self.expired_before():
            return None
        return self._sessions.get(key, {}).get((session_end_ms, session_start_ms))

    def _find(
        self,
        key_from: bytes | None,
        key_to: bytes | None,
        earliest_end: int,
        latest_start: int,
        one_key: bool,
    ) -> Iterator[SessionEntry]:
        earliest_end = self._live_from(earliest_end)
        if one_key:
            assert key_from is not None
            keys = [key_from] if key_from in self._sessions else []
        else:
            lo = 0 if key_from is None else bisect.bisect_left(self._keys, key_from)
            hi = len(self._keys) if key_to is None else bisect.bisect_right(self._keys, key_to)
            keys = self._keys[lo:hi]
        # Materialised: a snapshot lets the caller remove and put sessions while iterating,
        # which is exactly what a session merge does.
        found: list[tuple[int, bytes, int, bytes]] = []
        for key in keys:
            order = self._order[key]
            sessions = self._sessions[key]
            for end, start in order[bisect.bisect_left(order, (earliest_end, MIN_TIME)) :]:
                if start <= latest_start:
                    found.append((end, key, start, sessions[(end, start)]))
        found.sort(key=lambda f: (f[0], f[1], f[2]))
        return iter([SessionEntry(key, start, end, value) for end, key, start, value in found])

    def _write(self, key: bytes, start: int, end: int, value: bytes | None) -> None:
        sessions = self._sessions.get(key)
        if value is None:
            if sessions is None or sessions.pop((end, start), None) is None:
                return
            order = self._order[key]
            del order[bisect.bisect_left(order, (end, start))]
            if not sessions:
                del self._sessions[key], self._order[key]
                del self._keys[bisect.bisect_left(self._keys, key)]
            members = self._by_end[end]
            members.discard((key, start))
            if not members:
                del self._by_end[end]
                del self._ends[bisect.bisect_left(self._ends, end)]
            return
        if sessions is None:
            sessions = self._sessions[key] = {}
            self._order[key] = []
            bisect.insort(self._keys, key)
        if (end, start) not in sessions:
            bisect.insort(self._order[key], (end, start))
            if end not in self._by_end:
                self._by_end[end] = set()
                bisect.insort(self._ends, end)
            self._by_end[end].add((key, start))
        sessions[(end, start)] = bytes(value)

    def _advance(self, session_end_ms: int) -> None:
        if session_end_ms <= self.observed_stream_time:
            return
        self.observed_stream_time = session_end_ms
        cut = bisect.bisect_right(self._ends, self.expired_before())
        for end in self._ends[:cut]:
            for key, start in list(self._by_end.get(end, ())):
                self._write(key, start, end, None)
