"""RocksDB stores (through ``rocksdict``): state larger than memory, surviving restarts.

Layout of one store directory ``state_dir / name``:

- the default column family holds the data;
- ``fluvial-meta`` holds bookkeeping that must never show up in iteration: the committed
  changelog offset, and for window stores the observed stream time and sequence number;
- window stores keep their windows in the default column family, keyed by the time segment
  (8-byte id) and then Kafka Streams' window key layout (key + 8-byte start + 4-byte seqnum).
  Expiry drops whole segments, each with one range deletion, which costs nothing per record.

Iteration reads in small batches and drops the RocksDB iterator between batches. An iterator
object keeps the database open, so an abandoned generator must not be able to hold the lock.

Another process can read a store that a task has open: :meth:`open_secondary` opens it as a
RocksDB *secondary* instance, which reads the task's files and sees its writes up to the last
:meth:`catch_up` (the reader process of interactive queries, :mod:`fluvial.iq.reader`).

Durability: each commit's data and the changelog offset it reaches go in one atomic write, whose
write-ahead log reaches the operating system at once (a killed process loses nothing) but is not
synced to disk at each commit. After a machine crash RocksDB recovers a consistent earlier write,
so the store holds an older offset and restore replays the changelog from there: the changelog,
not the local disk, is the store's record. Closing a store syncs.
"""

from __future__ import annotations

import shutil
import struct
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from rocksdict import AccessType, Options, Rdict, WriteBatch

from fluvial.errors import StreamsError
from fluvial.state.base import (
    TIMESTAMP_PREFIX,
    ChangelogMessage,
    ChangelogRecord,
    KeyValueStore,
    WindowStore,
    parse_window_store_key,
    window_store_key,
)

_LONG = struct.Struct(">q")
_INT = struct.Struct(">i")
_META_CF = "fluvial-meta"
_SEGMENT_PREFIX = "segment-"
_COMMITTED_OFFSET = b"committed_offset"
_STREAM_TIME = b"observed_stream_time"
_SEQNUM = b"seqnum"
_BATCH = 512


def _options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    return options


def _secondary_options() -> Options:
    options = Options(raw_mode=True)
    # Catching up loads the primary's new table files with this many threads, started anew on
    # every call: the default (16) makes each catch-up cost milliseconds of CPU, one costs ~30 us.
    options.set_max_file_opening_threads(1)
    # A secondary logs every catch-up to its own info log: keep that log small.
    options.set_max_log_file_size(1 << 20)
    options.set_keep_log_file_num(1)
    return options


def _scan(db: Rdict, lower: bytes | None, upper: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    """Entries with ``lower <= key <= upper`` in key order, read ``_BATCH`` at a time."""
    seek_from = lower
    skip_first = False  # after the first batch we re-seek to the last key already yielded
    while True:
        batch: list[tuple[bytes, bytes]] = []
        it = db.iter()
        if seek_from is None:
            it.seek_to_first()
        else:
            it.seek(seek_from)
        if skip_first and it.valid() and it.key() == seek_from:
            it.next()
        while it.valid() and len(batch) < _BATCH:
            key = it.key()
            if upper is not None and key > upper:
                break
            batch.append((key, it.value()))
            it.next()
        exhausted = len(batch) < _BATCH
        del it
        yield from batch
        if exhausted:
            return
        seek_from, skip_first = batch[-1][0], True


def read_committed_offset(path: Path) -> int | None:
    """The changelog offset a closed RocksDB store at ``path`` reflects (``None``: no store).

    Opens the store read-only, so it needs no lock and changes nothing: for choosing between
    two copies of a store before either is opened.
    """
    try:
        Rdict.list_cf(str(path), _options())
        db = Rdict(str(path), Options(raw_mode=True), column_families={_META_CF: _options()},
                   access_type=AccessType.read_only())  # fmt: skip
    except Exception:  # no database there (yet), or not a fluvial store
        return None
    try:
        raw = db.get_column_family(_META_CF).get(_COMMITTED_OFFSET)
        return None if raw is None else int(_LONG.unpack(raw)[0])
    finally:
        db.close()


class _RocksDBStore:
    """Opening, closing and the meta column family, shared by both RocksDB stores."""

    name: str
    committed_offset: int | None

    def __init__(self) -> None:
        self._db: Rdict | None = None
        self._meta: Rdict | None = None
        self._path: Path | None = None
        self._secondary_dir: Path | None = None  # set: a read-only secondary instance
        self._families: set[str] = set()

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def _open(self, state_dir: Path | None) -> list[str]:
        """Open the DB; return the names of its column families."""
        if state_dir is None:
            raise ValueError(
                f"persistent store {self.name!r} needs a state directory: pass state_dir to init()"
            )
        if self._db is not None:
            return []
        self._path = Path(state_dir) / self.name
        if self._secondary_dir is not None:
            return self._open_as_secondary(self._path, self._secondary_dir)
        self._path.mkdir(parents=True, exist_ok=True)
        options = _options()
        try:
            families = Rdict.list_cf(str(self._path), options)
        except Exception:  # a new directory has no database yet
            families = ["default"]
        wanted = {cf: _options() for cf in families if cf != "default"}
        wanted[_META_CF] = _options()
        try:
            self._db = Rdict(str(self._path), options, column_families=wanted)
        except Exception as exc:
            raise StreamsError(
                f"cannot open RocksDB store {self.name!r} at {self._path}: {exc}. If the lock is "
                "held, another store instance (in this or another process) still has it open: "
                "close it first, or give each task its own state directory"
            ) from exc
        self._meta = self._db.get_column_family(_META_CF)
        raw = self._meta.get(_COMMITTED_OFFSET)
        self.committed_offset = None if raw is None else _LONG.unpack(raw)[0]
        return list(families)

    def _open_as_secondary(self, path: Path, secondary_dir: Path) -> list[str]:
        try:
            families = Rdict.list_cf(str(path), _secondary_options())
            secondary_dir.mkdir(parents=True, exist_ok=True)
            self._db = Rdict(
                str(path), _secondary_options(),
                column_families={cf: _secondary_options() for cf in families if cf != "default"},
                access_type=AccessType.secondary(str(secondary_dir)),
            )  # fmt: skip
        except Exception as exc:
            raise StreamsError(f"cannot read RocksDB store {self.name!r} at {path}: {exc}") from exc
        self._families = set(families)
        self._meta = self._db.get_column_family(_META_CF)
        raw = self._meta.get(_COMMITTED_OFFSET)
        self.committed_offset = None if raw is None else _LONG.unpack(raw)[0]
        return list(families)

    def open_secondary(self, state_dir: Path, secondary_dir: Path) -> None:
        """Open the store that another process has open in ``state_dir``, read-only.

        A RocksDB secondary instance reads the primary's files; it keeps its own info log in
        ``secondary_dir``. It sees the primary's writes as of the opening, then as of each
        :meth:`catch_up`. Each write batch is seen whole or not at all.
        """
        self._secondary_dir = Path(secondary_dir)
        self.init(state_dir)  # type: ignore[attr-defined]  # every store class defines it

    def catch_up(self) -> bool:
        """Secondary only: see the primary's newest writes.

        Returns ``False`` when the primary's column families changed (a window or session
        segment was created or dropped): a secondary does not follow that, so reopen it.
        """
        db = self._live_db()
        assert self._secondary_dir is not None and self._path is not None and self._meta
        db.try_catch_up_with_primary()
        # Listed after the catch-up: a family created before it is always noticed here.
        if set(Rdict.list_cf(str(self._path), _secondary_options())) != self._families:
            return False
        raw = self._meta.get(_STREAM_TIME)
        if raw is not None:  # window, session and versioned stores: their expiry moves on
            self.observed_stream_time = _LONG.unpack(raw)[0]
        return True

    def _release(self) -> None:
        """Drop every object that keeps the DB alive, then close it."""
        self._meta = None
        if self._db is not None:
            db, self._db = self._db, None
            db.close()
            del db

    def _write_meta(self, batch: WriteBatch, key: bytes, value: int | None) -> None:
        assert self._db is not None
        handle = self._db.get_column_family_handle(_META_CF)
        if value is None:
            batch.delete(key, handle)
        else:
            batch.put(key, _LONG.pack(value), handle)

    def _flush_meta(self, sync: bool = False) -> None:
        """Persist the committed offset; with ``sync`` (at close), make everything durable."""
        if self._secondary_dir is not None:
            return  # read-only: the primary owns the data
        db = self._live_db()
        batch = WriteBatch(raw_mode=True)
        self._write_meta(batch, _COMMITTED_OFFSET, self.committed_offset)
        db.write(batch)
        if sync:
            db.flush_wal(True)

    def _live_db(self) -> Rdict:
        if self._db is None:
            raise RuntimeError(
                f"state store {self.name!r} is not open: call init(state_dir) before using it"
            )
        return self._db

    def _wipe(self) -> None:
        self._release()
        if self._path is not None and self._path.exists():
            Rdict.destroy(str(self._path), _options())
            shutil.rmtree(self._path, ignore_errors=True)
        self.committed_offset = None


class RocksDBKeyValueStore(_RocksDBStore, KeyValueStore):
    """A persistent key-value store in ``state_dir / name``."""

    def __init__(self, name: str) -> None:
        KeyValueStore.__init__(self, name, persistent=True)
        _RocksDBStore.__init__(self)

    def init(self, state_dir: Path | None) -> None:
        self._open(state_dir)

    def flush(self) -> None:
        self._flush_meta()

    def close(self) -> None:
        if self._db is not None:
            self._flush_meta(sync=True)
        self._release()

    def destroy(self) -> None:
        self._wipe()

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._live_db().get(key)
        return value

    def put(self, key: bytes, value: bytes | None, timestamp_ms: int = 0) -> None:
        db = self._live_db()
        if value is None:
            db.delete(key)
        else:
            db.put(key, bytes(value))
        self._log(key, value, timestamp_ms)

    def range(self, from_key: bytes | None, to_key: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        return _scan(self._live_db(), from_key, to_key)

    def approximate_num_entries(self) -> int:
        count = self._live_db().property_int_value("rocksdb.estimate-num-keys")
        return int(count or 0)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._live_db().write(self._stage_all(records))

    def restore_batch(self, batch: Sequence[ChangelogMessage], timestamped: bool = False) -> None:
        # One loop from the consumer's records to the write batch: a restore's hot path.
        db = self._live_db()
        staged = WriteBatch(raw_mode=True)
        put, delete = staged.put, staged.delete
        if timestamped:
            pack = TIMESTAMP_PREFIX.pack
            for m in batch:
                value = m.value()
                if value is None:
                    delete(m.key())
                else:
                    put(m.key(), pack(m.timestamp()[1]) + value)
        else:
            for m in batch:
                value = m.value()
                if value is None:
                    delete(m.key())
                else:
                    put(m.key(), value)
        db.write(staged)

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        db = self._live_db()
        batch = self._stage_all(records)
        self._write_meta(batch, _COMMITTED_OFFSET, committed_offset)
        db.write(batch)  # data and offset: one atomic write (see the module docstring)
        self.committed_offset = committed_offset

    def _stage_all(self, records: Iterable[ChangelogRecord]) -> WriteBatch:
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete  # once per batch: a restore comes through here
        for key, value, _ in records:
            if value is None:
                delete(key)
            else:
                put(key, value if type(value) is bytes else bytes(value))
        return batch


class RocksDBWindowStore(_RocksDBStore, WindowStore):
    """A persistent window store, segmented by window start.

    ``segment_interval_ms`` defaults to Kafka Streams' choice, ``max(retention / 2, 60 s)``:
    about three segments live at a time. Reads filter by retention exactly; segments only decide
    when the bytes of expired windows are reclaimed.

    All segments share the default column family: a key is the 8-byte segment id (ordered as
    numbers, negative ones first) and then the window key, so a segment is one contiguous range
    of keys and dropping it is one range deletion in the write batch that moves stream time.
    A column family per segment would cost milliseconds of CPU to create and to drop (RocksDB
    rewrites its options file each time), every segment interval of stream time.
    """

    def __init__(
        self,
        name: str,
        retention_ms: int,
        window_size_ms: int,
        retain_duplicates: bool = False,
        segment_interval_ms: int | None = None,
    ) -> None:
        WindowStore.__init__(self, name, True, retention_ms, window_size_ms, retain_duplicates)
        _RocksDBStore.__init__(self)
        if segment_interval_ms is None:
            segment_interval_ms = max(retention_ms // 2, 60_000)
        if segment_interval_ms <= 0:
            raise ValueError(f"segment_interval_ms must be positive, got {segment_interval_ms}")
        self.segment_interval_ms = segment_interval_ms
        self._segments: set[int] = set()  # ids of segments that may hold data

    # -- lifecycle ---------------------------------------------------------------------------

    def init(self, state_dir: Path | None) -> None:
        if self._db is not None:
            return
        families = self._open(state_dir)
        db = self._live_db()
        assert self._meta is not None
        raw_time = self._meta.get(_STREAM_TIME)
        self.observed_stream_time = -(2**63) if raw_time is None else _LONG.unpack(raw_time)[0]
        raw_seq = self._meta.get(_SEQNUM)
        self._seqnum = 0 if raw_seq is None else _LONG.unpack(raw_seq)[0]
        if self._secondary_dir is None:  # a reader never writes: the task moved them already
            self._move_legacy_segments(families)
        self._segments = self._find_segments(db)

    def catch_up(self) -> bool:
        """Secondary only: see the primary's newest writes, segments created since included
        (they are new keys in the shared family, so the set is found anew)."""
        if not super().catch_up():
            return False
        self._segments = self._find_segments(self._live_db())
        return True

    def _find_segments(self, db: Rdict) -> set[int]:
        """The ids of segments holding data: one seek per segment."""
        found: set[int] = set()
        it = db.iter()
        it.seek_to_first()
        while it.valid():
            segment_id = _SEGMENT_ID.unpack_from(it.key())[0] - _SIGN
            found.add(segment_id)
            it.seek(_segment_prefix(segment_id + 1))
        del it
        return found

    def _move_legacy_segments(self, families: list[str]) -> None:
        """Stores written before segments shared a column family kept one family per segment:
        move their entries under segment-id keys, then drop those families."""
        db = self._live_db()
        for family in families:
            if not family.startswith(_SEGMENT_PREFIX):
                continue
            segment_id = int(family[len(_SEGMENT_PREFIX) :])
            prefix = _segment_prefix(segment_id)
            batch = WriteBatch(raw_mode=True)
            segment = db.get_column_family(family)
            for store_key, value in _scan(segment, None, None):
                batch.put(prefix + store_key, value)
            del segment  # the handle keeps the family alive; let it go before dropping it
            db.write(batch)
            db.drop_column_family(family)
        db.flush_wal(True)

    def flush(self) -> None:
        self._flush_meta()

    def close(self) -> None:
        if self._db is not None:
            self._flush_meta(sync=True)
        self._segments.clear()
        self._release()

    def destroy(self) -> None:
        self._segments.clear()
        self._wipe()
        self.observed_stream_time = -(2**63)
        self._seqnum = 0

    @property
    def segment_ids(self) -> list[int]:
        """Ids of the segments on disk (for tests and metrics)."""
        return sorted(self._segments)

    # -- writes ------------------------------------------------------------------------------

    def put(
        self, key: bytes, value: bytes | None, window_start_ms: int, timestamp_ms: int = 0
    ) -> None:
        db = self._live_db()
        batch = WriteBatch(raw_mode=True)
        self._drop_segments(batch, self._advance(batch, window_start_ms))
        if window_start_ms <= self.expired_before() or (value is None and self.retain_duplicates):
            # Expired (too late) or a tombstone a duplicate-keeping store cannot place: no write,
            # no changelog record; only the stream time may have moved.
            db.write(batch)
            return
        seqnum = self._next_seqnum()
        if self.retain_duplicates:
            self._write_meta(batch, _SEQNUM, self._seqnum)
        store_key = window_store_key(key, window_start_ms, seqnum)
        self._stage(batch, store_key, window_start_ms, value)
        # One batch: the data and the stream time it implies land together or not at all.
        db.write(batch)
        self._log(store_key, value, timestamp_ms)

    def restore(self, records: Iterable[ChangelogRecord]) -> None:
        self._restore(records, None, write_offset=False)

    def apply_committed(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None
    ) -> None:
        self._restore(records, committed_offset, write_offset=True)

    def _restore(
        self, records: Iterable[ChangelogRecord], committed_offset: int | None, write_offset: bool
    ) -> None:
        db = self._live_db()
        batch = WriteBatch(raw_mode=True)
        dead: list[int] = []
        for record in records:
            _, start, seqnum = parse_window_store_key(record.key)
            dead.extend(s for s in self._advance(batch, start) if s not in dead)
            if start <= self.expired_before():
                continue
            if self.retain_duplicates and seqnum > self._seqnum:
                self._seqnum = seqnum
                self._write_meta(batch, _SEQNUM, seqnum)
            # A live start never falls in a dead segment, so nothing staged here is dropped below.
            self._stage(batch, bytes(record.key), start, record.value)
        if write_offset:
            self._write_meta(batch, _COMMITTED_OFFSET, committed_offset)
            self.committed_offset = committed_offset
        self._drop_segments(batch, dead)
        # One batch: data, stream time, sequence, offset and dropped segments land together or
        # not at all.
        db.write(batch)

    def _stage(self, batch: WriteBatch, store_key: bytes, start: int, value: bytes | None) -> None:
        segment_id = start // self.segment_interval_ms
        if value is None:
            if segment_id in self._segments:
                batch.delete(_segment_prefix(segment_id) + store_key)
            return
        self._segments.add(segment_id)
        batch.put(_segment_prefix(segment_id) + store_key, bytes(value))

    def _advance(self, batch: WriteBatch, window_start_ms: int) -> list[int]:
        """Move stream time forward; return the segments that it killed (not yet dropped)."""
        if window_start_ms <= self.observed_stream_time:
            return []
        self.observed_stream_time = window_start_ms
        self._write_meta(batch, _STREAM_TIME, window_start_ms)
        # A segment is dead once its last possible start is expired.
        expired = self.expired_before()
        interval = self.segment_interval_ms
        return [s for s in self._segments if (s + 1) * interval - 1 <= expired]

    def _drop_segments(self, batch: WriteBatch, segment_ids: list[int]) -> None:
        for segment_id in segment_ids:
            self._segments.discard(segment_id)
            batch.delete_range(_segment_prefix(segment_id), _segment_prefix(segment_id + 1))

    # -- reads -------------------------------------------------------------------------------

    def fetch(self, key: bytes, window_start_ms: int) -> bytes | None:
        db = self._live_db()
        if window_start_ms <= self.expired_before():
            return None
        segment_id = window_start_ms // self.segment_interval_ms
        if segment_id not in self._segments:
            return None
        if not self.retain_duplicates:
            value: bytes | None = db.get(
                _segment_prefix(segment_id) + window_store_key(key, window_start_ms, 0)
            )
            return value
        for _, value in self.fetch_range(key, window_start_ms, window_start_ms):
            return value
        return None

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> Iterator[tuple[int, bytes]]:
        db = self._live_db()
        for segment_id, lo, hi in self._segments_between(time_from, time_to):
            prefix = _segment_prefix(segment_id)
            # Other keys that extend this key interleave in byte order; skip them by parsing.
            lower = prefix + window_store_key(key, lo, 0)
            upper = prefix + window_store_key(key, hi, -1)  # seqnum -1 is 0xffffffff: the highest
            for store_key, value in _scan(db, lower, upper):
                found_key, start, _ = parse_window_store_key(store_key[_SEGMENT_ID.size :])
                if found_key == key and lo <= start <= hi:
                    yield start, value

    def fetch_all(self, time_from: int, time_to: int) -> Iterator[tuple[bytes, int, bytes]]:
        db = self._live_db()
        for segment_id, lo, hi in self._segments_between(time_from, time_to):
            # Segments are keyed key-first; order one segment's matches by time in memory.
            matches = []
            # Every key of the segment is longer than the next segment's bare prefix, and below it.
            lower, upper = _segment_prefix(segment_id), _segment_prefix(segment_id + 1)
            for store_key, value in _scan(db, lower, upper):
                key, start, seqnum = parse_window_store_key(store_key[_SEGMENT_ID.size :])
                if lo <= start <= hi:
                    matches.append((start, key, seqnum, value))
            matches.sort(key=lambda m: (m[0], m[1], m[2]))
            for start, key, _, value in matches:
                yield key, start, value

    def _segments_between(self, time_from: int, time_to: int) -> list[tuple[int, int, int]]:
        """(segment id, first start, last start) of live segments overlapping the range."""
        time_from = max(time_from, self.expired_before() + 1)
        if time_from > time_to:
            return []
        interval = self.segment_interval_ms
        first, last = time_from // interval, time_to // interval
        return [
            (s, max(time_from, s * interval), min(time_to, (s + 1) * interval - 1))
            for s in sorted(self._segments)
            if first <= s <= last
        ]

    def approximate_num_entries(self) -> int:
        count = self._live_db().property_int_value("rocksdb.estimate-num-keys")
        return int(count or 0)


# Segment ids as unsigned 8-byte big-endian numbers with the sign bit flipped, so that byte
# order is numeric order, negative ids first.
_SEGMENT_ID = struct.Struct(">Q")
_SIGN = 2**63


def _segment_prefix(segment_id: int) -> bytes:
    return _SEGMENT_ID.pack(segment_id + _SIGN)
