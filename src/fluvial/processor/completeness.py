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
  ``PROGRESS_INTERVAL_MS``: its stream time, and whether it has read all of its input, with
  the offsets it read to (its *positions*);
- a downstream task reads each repartition partition through a :class:`WriterMergeQueue`, which
  splits the partition by writer and releases records merged by timestamp, as a task merges its
  input partitions: a record goes only once every other writer has either a record waiting,
  written as far in event time, or is *idle*: it said it has read all of its input, and its
  input partitions still end where it read to (:class:`InputEnds`, read from Kafka after the
  record arrived). An idle writer holds nothing back; one whose input grew since it said so
  holds time back until its next progress, however long it takes to come (a paused or
  starved process), and no wall clock decides.

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
NO_TIME = -(2**63)
#: How recently a writer's input ends must have been read for :meth:`WriterMergeQueue.bound`,
#: which no one record's arrival dates.
FRESH_ENDS_S = 0.1

#: A writer's input partitions and the offset it read each to: ((topic, partition, offset), ...).
Positions = tuple[tuple[str, int, int], ...]

_PROGRESS = struct.Struct(">q?")  # stream time, caught up
_POSITION = struct.Struct(">iq")  # partition, offset (after the topic's name)
_NAME = struct.Struct(">H")

log = logging.getLogger(__name__)


def encode_progress(stream_time_ms: int, caught_up: bool, positions: Positions = ()) -> bytes:
    """A progress record's value: stream time, whether the writer has read all of its input,
    and (when it has) each of its input partitions with the offset it read to."""
    parts = [_PROGRESS.pack(stream_time_ms, caught_up)]
    for topic, partition, offset in positions:
        name = topic.encode()
        parts += [_NAME.pack(len(name)), name, _POSITION.pack(partition, offset)]
    return b"".join(parts)


def decode_progress(data: bytes) -> tuple[int, bool, Positions | None]:
    """(stream time, read all of its input, positions). Positions are None in a progress
    record of an older fluvial, which said "read all" without saying where: such a writer is
    not taken as idle until its next progress."""
    stream_time, caught_up = _PROGRESS.unpack_from(data)
    at = _PROGRESS.size
    if at == len(data):
        return stream_time, bool(caught_up), (None if caught_up else ())
    positions = []
    while at < len(data):
        (length,) = _NAME.unpack_from(data, at)
        at += _NAME.size
        topic = data[at : at + length].decode()
        at += length
        partition, offset = _POSITION.unpack_from(data, at)
        at += _POSITION.size
        positions.append((topic, partition, offset))
    return stream_time, bool(caught_up), tuple(positions)


class InputEnds:
    """The end offsets of writers' input partitions, as a worker last read them from Kafka.

    A downstream task asks :meth:`reached` whether an idle writer's input still ends where the
    writer read to. The answer counts only if the ends were read after the record it would
    release arrived: every input record written before that record was, and so may be older
    than it, is then inside the end read. Partitions asked about without such an answer are
    :meth:`wanted`; the worker reads them (:meth:`update`) and the tasks look again.
    """

    def __init__(self) -> None:
        self._ends: dict[tuple[str, int], tuple[int, float]] = {}  # -> (end offset, read at)
        self._wanted: set[tuple[str, int]] = set()

    def reached(self, positions: Positions, since: float) -> bool:
        """Whether every partition in ``positions`` ended at or before its offset when read
        after ``since`` (time.monotonic())."""
        reached = True
        for topic, partition, offset in positions:
            known = self._ends.get((topic, partition))
            if known is None or known[1] < since:
                self._wanted.add((topic, partition))
                reached = False
            elif known[0] > offset:
                reached = False
        return reached

    def wanted(self) -> set[tuple[str, int]]:
        return self._wanted

    def update(self, ends: dict[tuple[str, int], int], read_at: float) -> None:
        """End offsets read from Kafka at ``read_at`` (time.monotonic(), taken before asking)."""
        for tp, end in ends.items():
            self._ends[tp] = (end, read_at)
        self._wanted.difference_update(ends)

    def forget(self) -> None:
        """Drop every end read: after a pause, input may have grown meanwhile."""
        self._ends.clear()


class _Progress(NamedTuple):
    """A writer's progress record, kept in its writer's order until it reaches the head.

    Never at a queue's head once :meth:`WriterMergeQueue._take_progress` has run; its
    ``timestamp_ms`` only lets a queue hold both kinds under one type."""

    stream_time: int
    idle: bool
    offset: int
    positions: Positions | None

    @property
    def timestamp_ms(self) -> int:
        return self.stream_time


class WriterState(NamedTuple):
    """What a downstream task knows of one writer, as committed (see :meth:`commit_state`)."""

    high: int  # how far in event time it has written or reported
    idle: bool  # its last progress said it has read all of its input, at ``positions``
    done: int  # its last record processed (-1: none), skipped after a restart
    positions: Positions = ()  # where it had read its input to, when idle


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
        ends: InputEnds | None = None,
        max_held: int = MAX_HELD_RECORDS,
    ) -> None:
        """``expected_writers``: ids of every upstream task that writes this partition, so a
        writer that has not written yet holds records back too. ``restored``: what the last
        commit knew of each writer; records it had processed are skipped when read again.
        ``ends``: where the writers' input partitions end, to tell an idle writer from one whose
        input grew since it said it had read all of it (None: a writer idle by its word is)."""
        restored = restored or {}
        writers = list(expected_writers) + [w for w in restored if w not in expected_writers]
        self._queues: dict[str, deque[ConsumedRecord | _Progress]] = {w: deque() for w in writers}
        self._high = {w: restored[w].high if w in restored else NO_TIME for w in writers}
        # Where each writer said it had read all of its input to (None: it has not said so).
        self._idle: dict[str, Positions | None] = {
            w: restored[w].positions if w in restored and restored[w].idle else None
            for w in writers
        }
        self._ends = ends
        # When each batch of records arrived: (first offset, time.monotonic()), oldest first.
        self._arrivals: deque[tuple[int, float]] = deque()
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
        arrived: float | None = time.monotonic()
        for record in records:
            if arrived is not None:
                self._arrivals.append((record.offset, arrived))
                arrived = None
            self._end_offset = record.offset + 1
            writer, progress, headers = _split_headers(record.headers)
            queue = self._queues.get(writer)
            if queue is None:  # a writer the topology did not announce (or an older fluvial)
                log.debug("records of writer %r, which was not expected (%s)",
                          writer, sorted(self._queues))  # fmt: skip
                queue = self._queues[writer] = deque()
                self._high[writer] = NO_TIME
                self._idle[writer] = None
                self._done[writer] = -1
            if record.offset <= self._skip.get(writer, -1):
                continue  # taken before a restart, and committed with its effects
            if progress is not None:
                stream_time, idle, positions = decode_progress(progress)
                queue.append(_Progress(stream_time, idle, record.offset, positions))
            else:
                if headers is not record.headers:
                    record = ConsumedRecord(record.key, record.value, record.timestamp_ms,
                                            record.offset, headers)  # fmt: skip
                queue.append(record)
                self._size += 1
            touched.add(writer)
        for writer in touched:
            self._take_progress(writer)
        if len(self._arrivals) > 64:
            self._forget_arrivals()
        self._checked = False

    def _forget_arrivals(self) -> None:
        """Drop the arrival times of batches wholly taken."""
        held_from = self.next_offset()
        arrivals = self._arrivals
        while len(arrivals) > 1 and held_from is not None and arrivals[1][0] <= held_from:
            arrivals.popleft()

    def _arrival(self, offset: int) -> float:
        """When the record at ``offset`` arrived (its batch's time)."""
        found = 0.0
        for first, arrived in self._arrivals:
            if first > offset:
                break
            found = arrived
        return found

    def _take_progress(self, writer: str) -> None:
        """Apply the progress records at the head of ``writer``'s queue."""
        queue = self._queues[writer]
        while queue and type(queue[0]) is _Progress:
            progress = queue.popleft()
            assert isinstance(progress, _Progress)
            if progress.stream_time > self._high[writer]:
                self._high[writer] = progress.stream_time
            # An older fluvial's "read all" says not where: not idle until it says more.
            self._idle[writer] = progress.positions if progress.idle else None
            if progress.idle:
                log.debug("writer %s has read all of its input (stream time %d, offset %d): %s",
                          writer, progress.stream_time, progress.offset, progress.positions)  # fmt: skip
            self._done[writer] = progress.offset
        if queue:
            head = queue[0]
            if head.timestamp_ms > self._high[writer]:
                self._high[writer] = head.timestamp_ms
            self._idle[writer] = None  # it wrote again: it holds time back until it says so

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
        since = time.monotonic() - FRESH_ENDS_S
        for writer, queue in self._queues.items():
            if queue:
                t = queue[0].timestamp_ms
            elif self._holds_back(writer, since):
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
        states = {}
        for w in self._queues:
            if self._high[w] != NO_TIME or self._done[w] >= 0:
                positions = self._idle[w]
                idle = positions is not None
                states[w] = WriterState(self._high[w], idle, self._done[w], positions or ())
        return states

    # -- the merge ------------------------------------------------------------------------------
    def _holds_back(self, writer: str, since: float) -> bool:
        """Whether ``writer``, with nothing waiting, may still write an older record than the
        others': unless it said it read all of its input, and its input partitions, read from
        Kafka after ``since`` (when the record to release arrived), still end there.

        Input written before that record was is then inside what the writer read: live, a
        producer that writes in event-time order never has a writer's record come late this
        way. Input written after it is as any record arriving later than another partition's.
        """
        positions = self._idle[writer]
        if positions is None:
            return True
        return self._ends is not None and not self._ends.reached(positions, since)

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
        since = -1.0
        for writer, queue in self._queues.items():
            if not queue and self._high[writer] < candidate_time:
                if since < 0:
                    since = self._arrival(self._queues[candidate][0].offset)
                if not self._holds_back(writer, since):
                    continue
                # This writer may still write an older record: wait for it, unless the
                # held records pass the bound.
                if self._size <= self._max_held:
                    if self._idle[writer] is not None:
                        self._checked = False  # its input's end is on its way: look again
                    return None
                self.overflows += 1
                break
        self._ready = candidate
        return candidate


def _split_headers(
    headers: Sequence[tuple[str, bytes | None]],
) -> tuple[str, bytes | None, Sequence[tuple[str, bytes | None]]]:
    """(writer id, progress payload or None, the headers without fluvial's own)."""
    writer = ""
    progress: bytes | None = None
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
