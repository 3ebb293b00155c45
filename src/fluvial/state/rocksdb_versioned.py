"""The RocksDB versioned store.

Layout (column families of ``state_dir / name``):

- ``default``: one entry per version. Key: 4-byte BE key length + key + 8-byte BE timestamp, so
  that one key's versions are contiguous and in time order (timestamps are non-negative, so
  big-endian bytes sort numerically) and no key's versions interleave with a longer key's.
  Value: ``b"\\x01" + value``, or ``b"\\x00"`` for a tombstone.
- ``versioned-reclaim``: 8-byte BE time + key, empty value: once the history cutoff passes that
  time, the key may hold versions that can no longer be observed (see
  :func:`fluvial.state.versioned.prunable`). Reclaiming walks this index from its start, so it
  costs per reclaimed version and never scans live history.
- ``fluvial-meta``: the committed offset and the observed stream time.

Lookups are RocksDB seeks: ``seek_for_prev`` finds the version valid at a time, ``seek`` the
one after it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rocksdict import Rdict, WriteBatch

from fluvial.state.base import ChangelogRecord
from fluvial.state.rocksdb import _LONG, _STREAM_TIME, _options, _RocksDBStore, _scan
from fluvial.state.versioned import _NO_TIME, Version, VersionedKeyValueStore, prunable

_INT = struct.Struct(">I")
_RECLAIM_CF = "versioned-reclaim"
_LIVE, _TOMBSTONE = b"\x01", b"\x00"
_MAX_TIME = 2**63 - 1


def _prefix(key: bytes) -> bytes:
    return _INT.pack(len(key)) + key


def _decode(raw: bytes) -> bytes | None:
    return None if raw[:1] == _TOMBSTONE else raw[1:]


class RocksDBVersionedKeyValueStore(_RocksDBStore, VersionedKeyValueStore):
    """A persistent versioned key-value store in ``state_dir / name``."""

    def __init__(self, name: str, history_retention_ms: int) -> None:
        VersionedKeyValueStore.__init__(self, name, True, history_retention_ms)
        _RocksDBStore.__init__(self)
        self._reclaim: Rdict | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, state_dir: Path | None) -> None:
        if self._db is not None:
            return
        self._open(state_dir)
        db = self._live_db()
        try:
            self._reclaim = db.get_column_family(_RECLAIM_CF)
        except Exception:  # a new store: the family does not exist yet
            self._reclaim = db.create_column_family(_RECLAIM_CF, _options())
        assert self._meta is not None
        raw = self._meta.get(_STREAM_TIME)
        self.observed_stream_time = _NO_TIME if raw is None else _LONG.unpack(raw)[0]

    def flush(self) -> None:
        self._flush_meta()

    def close(self) -> None:
        if self._db is not None:
            self._flush_meta(sync=True)
        self._reclaim = None
        self._release()

    def destroy(self) -> None:
        self._reclaim = None
        self._wipe()
        self.observed_stream_time = _NO_TIME

    def approximate_num_entries(self) -> int:
        """Stored versions, tombstones included (a RocksDB estimate)."""
        return int(self._live_db().property_int_value("rocksdb.estimate-num-keys") or 0)

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        """Apply changelog records and the offset they reach in one atomic RocksDB write."""
        self._check_open()
        self._write_versions(self._admit(records), commit=True, committed_offset=committed_offset)

    # -- reads -------------------------------------------------------------------------------

    def _seek(self, target: bytes, backwards: bool) -> tuple[bytes, bytes] | None:
        it = self._live_db().iter()
        if backwards:
            it.seek_for_prev(target)
        else:
            it.seek(target)
        found = (it.key(), it.value()) if it.valid() else None
        del it  # an iterator keeps the DB open; never let one outlive the call
        return found

    def _floor(self, key: bytes, timestamp_ms: int) -> Version | None:
        prefix = _prefix(key)
        found = self._seek(prefix + _LONG.pack(timestamp_ms), backwards=True)
        if found is None or not found[0].startswith(prefix) or len(found[0]) != len(prefix) + 8:
            return None
        return _LONG.unpack_from(found[0], len(prefix))[0], _decode(found[1])

    def _next_after(self, key: bytes, timestamp_ms: int) -> int | None:
        if timestamp_ms == _MAX_TIME:
            return None
        prefix = _prefix(key)
        found = self._seek(prefix + _LONG.pack(timestamp_ms + 1), backwards=False)
        if found is None or not found[0].startswith(prefix) or len(found[0]) != len(prefix) + 8:
            return None
        result: int = _LONG.unpack_from(found[0], len(prefix))[0]
        return result

    def _latest(self, key: bytes) -> Version | None:
        return self._floor(key, _MAX_TIME)

    # -- writes ------------------------------------------------------------------------------

    def _write_versions(
        self,
        versions: list[tuple[bytes, int, bytes | None]],
        commit: bool = False,
        committed_offset: int | None = None,
    ) -> None:
        db = self._live_db()
        reclaim = self._family_handle()
        batch = WriteBatch(raw_mode=True)
        for key, timestamp_ms, value in versions:
            stored = _TOMBSTONE if value is None else _LIVE + bytes(value)
            batch.put(_prefix(key) + _LONG.pack(timestamp_ms), stored)
            # This version ends its predecessor's validity (and, as a tombstone, the key's).
            batch.put(_LONG.pack(timestamp_ms) + key, b"", reclaim)
        if self.observed_stream_time != _NO_TIME:
            self._write_meta(batch, _STREAM_TIME, self.observed_stream_time)
        if commit:
            self.committed_offset = committed_offset
            self._write_meta(batch, b"committed_offset", committed_offset)
        # One batch: versions, stream time and (at commit) the offset land together or not at all.
        db.write(batch)  # not synced at commit: see fluvial.state.rocksdb's docstring
        self._reclaim_expired()

    def _reclaim_expired(self) -> None:
        """Delete versions no longer observable; idempotent, so a crash midway is harmless."""
        cutoff = self.history_cutoff()
        if cutoff < 0:
            return  # every timestamp is >= 0: nothing can be out of retention yet
        assert self._reclaim is not None
        db = self._live_db()
        reclaim = self._family_handle()
        batch = WriteBatch(raw_mode=True)
        done: set[bytes] = set()
        for index_key, _ in _scan(self._reclaim, None, None):
            if _LONG.unpack_from(index_key)[0] > cutoff:
                break
            batch.delete(index_key, reclaim)
            key = index_key[8:]
            if key in done:
                continue
            done.add(key)
            prefix = _prefix(key)
            entries = [
                (k, raw)
                for k, raw in _scan(db, prefix, prefix + b"\xff" * 8)
                if len(k) == len(prefix) + 8
            ]
            times = [_LONG.unpack_from(k, len(prefix))[0] for k, _ in entries]
            values = [_decode(raw) for _, raw in entries]
            for k, _ in entries[: prunable(times, values, cutoff)]:
                batch.delete(k)
        if done:
            db.write(batch)

    def _family_handle(self) -> Any:
        return self._live_db().get_column_family_handle(_RECLAIM_CF)
