"""Catch-up completeness: stream time that does not outrun a repartition topic's slowest writer.

Several upstream tasks write into each partition of a repartition topic, each at its own pace.
Read in offset order, a partition interleaves them as they happened to run: during a backlog
or a replay one writer may be minutes of event time ahead of another, and a downstream window
closed by the fast writer's records drops the slow writer's on-time records as late. Kafka
Streams has this hazard; fluvial removes it (``catch_up_completeness=True``, the default):

- every record an upstream task writes to a repartition topic carries its writer's id in the
  header :data:`WRITER_HEADER`;
- every upstream task also writes a small *progress record* (header :data:`PROGRESS_HEADER`, no
  key, no value) to each partition of the repartition topics it writes, every
  ``PROGRESS_INTERVAL_MS``: its stream time, and whether it has read all of its input;
- a downstream task reads each repartition partition through a :class:`WriterMergeQueue`, which
  splits the partition by writer and releases records merged by timestamp, as a task merges its
  input partitions: a record goes only once every other writer has either a record waiting,
  written as far in event time, or said it has read all of its input (an idle writer holds
  nothing back).

Records of one writer keep their order; only the interleaving of writers changes. Offsets then
no longer say what was processed, so a commit records, beside the lowest offset still waiting,
what the queue knows of each writer and its last record taken
(:meth:`WriterMergeQueue.commit_state`), and a restart skips those records. A writer sends
progress only when it changed, so an idle application writes nothing. Memory is bounded: past :data:`MAX_HELD_RECORDS` held
records in one partition the queue releases its oldest head anyway and counts it as an overflow.
"""

from __future__ import annotations

import logging
import struct
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from fluvial.processor.collector import ORIGIN_HEADER, ConsumedRecord

WRITER_HEADER = "fluvial.writer"
PROGRESS_HEADER = "fluvial.progress"
PROGRESS_INTERVAL_MS = 100
MAX_HELD_RECORDS = 100_000
# How long a writer must have read all of its input before it stops holding time back.
IDLE_WRITER_MS = 1000
NO_TIME = -(2**63)

_PROGRESS = struct.Struct(">q?")  # stream time, caught up

log = logging.getLogger(__name__)


def encode_progress(stream_time_ms: int, caught_up: bool) -> bytes:
    return _PROGRESS.pack(stream_time_ms, caught_up)


def decode_progress(data: bytes) -> tuple[int, bool]:
    stream_time, caught_up = _PROGRESS.unpack(data)
    return stream_time, bool(caught_up)


class _Progress(NamedTuple):
    """A writer's progress record, kept in its writer's order until it reaches the head.

    Never at a queue's head once :meth:`WriterMergeQueue._take_progress` has run; its
    ``timestamp_ms`` only lets a queue hold both kinds under one type."""

    stream_time: int
    idle: bool
    offset: int

    @property
    def timestamp_ms(self) -> int:
        return self.stream_time


class WriterState(NamedTuple):
    """What a downstream task knows of one writer, as committed (see :meth:`commit_state`)."""

    high: int  # how far in event time it has written or reported
    idle: bool  # its last progress said it has read all of its input
    done: int  # its last record processed (-1: none), skipped after a restart


class WriterMergeQueue:
    """The records of one repartition partition, merged across the upstream tasks that wrote them.

    Behaves like the ``deque`` a task keeps per input partition: ``bool(queue)`` says whether a
    record may go now, ``queue[0]`` is that record and ``popleft()`` takes it; ``len(queue)``
    counts every record held.

    A writer's progress records take effect in that writer's order, once its earlier records
    have gone: so what the queue knows of a writer always describes exactly the entries of it
    that were taken, and can be committed and restored (:meth:`commit_state`).
    """

    def __init__(
        self,
        expected_writers: Iterable[str],
        *,
        restored: dict[str, WriterState] | None = None,
        max_held: int = MAX_HELD_RECORDS,
    ) -> None:
        """``expected_writers``: ids of every upstream task that writes this partition, so a
        writer that has not written yet holds records back too. ``restored``: what the last
        commit knew of each writer; records it had processed are skipped when read again."""
        restored = restored or {}
        writers = list(expected_writers) + [w for w in restored if w not in expected_writers]
        self._queues: dict[str, deque[ConsumedRecord | _Progress]] = {w: deque() for w in writers}
        self._high = {w: restored[w].high if w in restored else NO_TIME for w in writers}
        now = time.monotonic()
        # Since when each writer has said it read all of its input (None: it has not).
        self._idle_since: dict[str, float | None] = {
            w: now if w in restored and restored[w].idle else None for w in writers
        }
        self._done = {w: restored[w].done if w in restored else -1 for w in writers}
        self._skip = {w: state.done for w, state in restored.items()}
        self._end_offset: int | None = None  # just past the last record added
        self._size = 0
        self._max_held = max_held
        self._ready: str | None = None  # the writer whose head may go now, once worked out
        self._checked = False
        self.overflows = 0

    # -- filling ------------------------------------------------------------------------------
    def extend(self, records: Iterable[ConsumedRecord]) -> None:
        touched = set()
        for record in records:
            self._end_offset = record.offset + 1
            writer, progress, headers = _split_headers(record.headers)
            queue = self._queues.get(writer)
            if queue is None:  # a writer the topology did not announce (or an older fluvial)
                log.debug("records of writer %r, which was not expected (%s)",
                          writer, sorted(self._queues))  # fmt: skip
                queue = self._queues[writer] = deque()
                self._high[writer] = NO_TIME
                self._idle_since[writer] = None
                self._done[writer] = -1
            if record.offset <= self._skip.get(writer, -1):
                continue  # taken before a restart, and committed with its effects
            if progress is not None:
                stream_time, idle = decode_progress(progress)
                queue.append(_Progress(stream_time, idle, record.offset))
            else:
                if headers is not record.headers:
                    record = ConsumedRecord(record.key, record.value, record.timestamp_ms,
                                            record.offset, headers)  # fmt: skip
                queue.append(record)
                self._size += 1
            touched.add(writer)
        for writer in touched:
            self._take_progress(writer)
        self._checked = False

    def _take_progress(self, writer: str) -> None:
        """Apply the progress records at the head of ``writer``'s queue."""
        queue = self._queues[writer]
        while queue and type(queue[0]) is _Progress:
            progress = queue.popleft()
            assert isinstance(progress, _Progress)
            if progress.stream_time > self._high[writer]:
                self._high[writer] = progress.stream_time
            if not progress.idle:
                self._idle_since[writer] = None
            elif self._idle_since[writer] is None:
                self._idle_since[writer] = time.monotonic()
                log.debug("writer %s has read all of its input (stream time %d, offset %d)",
                          writer, progress.stream_time, progress.offset)  # fmt: skip
            self._done[writer] = progress.offset
        if queue:
            head = queue[0]
            if head.timestamp_ms > self._high[writer]:
                self._high[writer] = head.timestamp_ms
            self._idle_since[writer] = None  # it wrote again: it holds time back until it says so

    def rearm_idle_writers(self) -> None:
        """Count every idle writer's idleness from now (its input may have grown while this
        task was paused), as a restart does with the idle writers it restores."""
        now = time.monotonic()
        for writer, since in self._idle_since.items():
            if since is not None:
                self._idle_since[writer] = now
        self._checked = False

    # -- the deque protocol a task uses ---------------------------------------------------------
    def __len__(self) -> int:
        return self._size

    def __bool__(self) -> bool:
        return self._head_writer() is not None

    def __getitem__(self, index: int) -> ConsumedRecord:
        if index != 0:
            raise IndexError("only the head of a merge queue can be read")
        writer = self._head_writer()
        if writer is None:
            raise IndexError("no record may go yet")
        return self._queues[writer][0]  # type: ignore[return-value]

    def popleft(self) -> ConsumedRecord:
        writer = self._head_writer()
        if writer is None:
            raise IndexError("no record may go yet")
        record = self._queues[writer].popleft()
        assert isinstance(record, ConsumedRecord)
        self._size -= 1
        self._done[writer] = record.offset
        self._take_progress(writer)
        self._checked = False
        return record

    def bound(self) -> int | None:
        """The lowest timestamp this queue may still release: its writers' heads, and how far
        the writers with nothing waiting (and not idle) have got. ``None``: nothing to wait for.

        A task reading this partition beside others must not process a record of another
        partition above this bound, or it would run ahead of a slower writer here.
        """
        low = None
        now = time.monotonic()
        for writer, queue in self._queues.items():
            if queue:
                t = queue[0].timestamp_ms
            elif self._holds_back(writer, now):
                t = self._high[writer]
            else:
                continue
            if low is None or t < low:
                low = t
        return low

    # -- offsets and commits --------------------------------------------------------------------
    def next_offset(self) -> int | None:
        """The offset to commit: the lowest one still held, or past everything read."""
        heads = [q[0].offset for q in self._queues.values() if q]
        return min(heads) if heads else self._end_offset

    def commit_state(self) -> dict[str, WriterState]:
        """What to commit with :meth:`next_offset`: each writer's state and last taken offset.

        Records are taken out of offset order across writers, so a restart from the committed
        offset skips each writer's records up to its ``done`` offset.
        """
        return {
            w: WriterState(self._high[w], self._idle_since[w] is not None, self._done[w])
            for w in self._queues
            if self._high[w] != NO_TIME or self._done[w] >= 0
        }

    # -- the merge ------------------------------------------------------------------------------
    def _holds_back(self, writer: str, now: float) -> bool:
        """Whether ``writer``, with nothing waiting, may still write an older record than the
        others': unless it has said for :data:`IDLE_WRITER_MS` that it read all of its input.

        Not at once: live, a writer reads all of its input between two records, and its next
        record may be older than another writer's newest.
        """
        since = self._idle_since[writer]
        return since is None or (now - since) * 1000 < IDLE_WRITER_MS

    def _head_writer(self) -> str | None:
        if self._checked:
            return self._ready
        self._checked = True
        self._ready = None
        candidate, candidate_time = None, 0
        for writer, queue in self._queues.items():
            if queue and (candidate is None or queue[0].timestamp_ms < candidate_time):
                candidate, candidate_time = writer, queue[0].timestamp_ms
        if candidate is None:
            return None
        now = time.monotonic()
        for writer, queue in self._queues.items():
            if not queue and self._high[writer] < candidate_time and self._holds_back(writer, now):
                # This writer may still write an older record: wait for it, unless the
                # held records pass the bound.
                if self._size <= self._max_held:
                    if self._idle_since[writer] is not None:
                        self._checked = False  # its idleness counts: look again later
                    return None
                self.overflows += 1
                break
        self._ready = candidate
        return candidate


def _split_headers(
    headers: Sequence[tuple[str, bytes | None]],
) -> tuple[str, bytes | None, Sequence[tuple[str, bytes | None]]]:
    """(writer id, progress payload or None, the headers without fluvial's own)."""
    writer, progress = "", None
    if not headers:
        return writer, progress, headers
    if len(headers) == 1 and headers[0][0] == WRITER_HEADER:  # the common case: a data record
        value = headers[0][1]
        return _writer_names.get(value) or _writer_name(value), None, ()
    if len(headers) == 2 and headers[0][0] == WRITER_HEADER and headers[1][0] == ORIGIN_HEADER:
        value = headers[0][1]  # a data record with its origin (fluvial.processor.collector)
        return _writer_names.get(value) or _writer_name(value), None, headers[1:]
    kept = []
    for key, value in headers:
        if key == WRITER_HEADER:
            writer = _writer_name(value)
        elif key == PROGRESS_HEADER:
            progress = value
        else:
            kept.append((key, value))
    if len(kept) == len(headers):
        return writer, progress, headers
    return writer, progress, kept or ()


_writer_names: dict[bytes | None, str] = {}


def _writer_name(value: bytes | None) -> str:
    """A writer id header's text, decoded once per writer."""
    name = _writer_names.get(value)
    if name is None:
        name = _writer_names[value] = value.decode() if value is not None else ""
    return name
