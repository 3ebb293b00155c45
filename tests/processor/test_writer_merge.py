"""Catch-up completeness's merge across the writers of one repartition partition.

An idle writer (it said it read all of its input) holds nothing back while its input still ends
where it read to, and holds time back, however long, once its input has grown: no wall clock
decides. Where its input ends counts only when read after the record to release arrived.
"""

from __future__ import annotations

import time

from fluvial.processor.collector import ConsumedRecord
from fluvial.processor.completeness import (
    PROGRESS_HEADER,
    WRITER_HEADER,
    InputEnds,
    WriterMergeQueue,
    WriterState,
    decode_progress,
    encode_progress,
)

A, B = "1_0", "1_1"
B_INPUT = (("clicks", 1, 40),)  # B read clicks-1 to offset 40


class Partition:
    """One repartition partition's records, offset by offset."""

    def __init__(self) -> None:
        self.offset = 0

    def record(self, writer: str, timestamp: int) -> ConsumedRecord:
        self.offset += 1
        headers = [(WRITER_HEADER, writer.encode())]
        return ConsumedRecord(b"k", b"v", timestamp, self.offset - 1, headers)

    def progress(self, writer: str, stream_time: int, idle: bool, positions=()) -> ConsumedRecord:  # noqa: ANN001
        self.offset += 1
        value = encode_progress(stream_time, idle, positions)
        headers = [(PROGRESS_HEADER, value), (WRITER_HEADER, writer.encode())]
        return ConsumedRecord(None, None, max(stream_time, 0), self.offset - 1, headers)


def drain(queue: WriterMergeQueue) -> list[int]:
    taken = []
    while queue:
        taken.append(queue.popleft().timestamp_ms)
    return taken


def test_progress_round_trips_with_where_the_writer_read_to() -> None:
    positions = (("clicks", 1, 40), ("views", 1, 7))
    assert decode_progress(encode_progress(1_000, True, positions)) == (1_000, True, positions)
    assert decode_progress(encode_progress(1_000, False)) == (1_000, False, ())
    # An older fluvial's "read all" says not where: it cannot count as idle.
    assert decode_progress(encode_progress(1_000, True)[:9]) == (1_000, True, None)


def test_an_idle_writer_whose_input_ends_where_it_read_holds_nothing_back() -> None:
    ends = InputEnds()
    queue = WriterMergeQueue([A, B], ends=ends)
    p = Partition()
    queue.extend([p.progress(B, 500, True, B_INPUT), p.record(A, 1_000), p.record(A, 2_000)])
    assert not queue  # where B's input ends is not known yet
    assert ends.wanted() == {("clicks", 1)}
    ends.update({("clicks", 1): 40}, time.monotonic())
    assert drain(queue) == [1_000, 2_000]  # at once: no second of idleness to wait


def test_an_idle_writer_whose_input_grew_holds_time_back_until_it_says_more() -> None:
    ends = InputEnds()
    queue = WriterMergeQueue([A, B], ends=ends)
    p = Partition()
    queue.extend([p.progress(B, 500, True, B_INPUT), p.record(A, 1_000)])
    ends.update({("clicks", 1): 45}, time.monotonic())  # 5 records B has not read
    time.sleep(0.05)
    assert not queue and not queue  # however long it takes
    assert queue.bound() == 500
    # B reads them: its records come, older than A's, and go first.
    queue.extend(
        [p.record(B, 700), p.record(B, 900), p.progress(B, 900, True, (("clicks", 1, 45),))]
    )
    assert drain(queue) == [700, 900, 1_000]


def test_ends_read_before_the_record_arrived_do_not_count() -> None:
    ends = InputEnds()
    ends.update({("clicks", 1): 40}, time.monotonic())
    queue = WriterMergeQueue([A, B], ends=ends)
    p = Partition()
    queue.extend([p.progress(B, 500, True, B_INPUT)])
    time.sleep(0.01)
    queue.extend([p.record(A, 1_000)])
    # Input B was given before A's record arrived may be older than it: not yet known.
    assert not queue
    assert ends.wanted() == {("clicks", 1)}
    ends.update({("clicks", 1): 40}, time.monotonic())
    assert drain(queue) == [1_000]


def test_a_writer_that_wrote_again_holds_back_until_its_next_progress() -> None:
    ends = InputEnds()
    queue = WriterMergeQueue([A, B], ends=ends)
    p = Partition()
    queue.extend([p.progress(B, 500, True, B_INPUT), p.record(B, 600)])
    queue.extend([p.record(A, 1_000)])
    ends.update({("clicks", 1): 40}, time.monotonic())
    assert drain(queue) == [600]  # B's record goes; then B may write again, older than A's
    assert not queue


def test_an_older_fluvials_idle_writer_is_waited_for() -> None:
    queue = WriterMergeQueue([A, B], ends=InputEnds())
    p = Partition()
    legacy = p.progress(B, 500, True)
    legacy = legacy._replace(headers=[(PROGRESS_HEADER, encode_progress(500, True)[:9]),
                                      (WRITER_HEADER, B.encode())])  # fmt: skip
    queue.extend([legacy, p.record(A, 1_000)])
    assert not queue
    assert queue.commit_state()[B] == WriterState(500, False, 0, ())


def test_an_idle_writer_restored_from_a_commit_keeps_where_it_read_to() -> None:
    ends = InputEnds()
    queue = WriterMergeQueue([A, B], ends=ends)
    p = Partition()
    queue.extend([p.progress(B, 500, True, B_INPUT), p.record(A, 1_000)])
    state = queue.commit_state()
    assert state[B] == WriterState(500, True, 0, B_INPUT)

    restarted_ends = InputEnds()
    restarted = WriterMergeQueue([A, B], restored=state, ends=restarted_ends)
    again = Partition()
    restarted.extend([again.progress(B, 500, True, B_INPUT), again.record(A, 1_000)])
    assert not restarted
    restarted_ends.update({("clicks", 1): 41}, time.monotonic())  # B's input grew meanwhile
    assert not restarted
    restarted_ends.update({("clicks", 1): 40}, time.monotonic())
    assert drain(restarted) == [1_000]
