"""What a window or session store still needs of its changelog, commit by commit."""

from __future__ import annotations

from fluvial.runtime.commit_metadata import CommitMetadata
from fluvial.runtime.horizon import ChangelogHorizon

RETENTION = 7_000  # a 5 s window with 2 s grace
SIZE = 5_000
MARGIN = RETENTION + SIZE


def test_spans_stay_needed_until_their_windows_are_past_retention():
    horizon = ChangelogHorizon(MARGIN, end=0)
    # Offsets 0..9 written while stream time reached 10_000.
    horizon.committed(10, stream_time=10_000, newest_written=10_000)
    # Offsets 10..19 written while stream time reached 20_000.
    horizon.committed(20, stream_time=20_000, newest_written=20_000)
    assert horizon.needed().needed_from == 0  # windows of the first span may still be live
    # The newest record is now a full margin past the first span's windows: they are gone.
    horizon.committed(30, stream_time=22_001, newest_written=10_001 + MARGIN)
    assert horizon.needed().needed_from == 10
    horizon.committed(30, stream_time=40_000, newest_written=40_000)
    assert horizon.needed().needed_from == 30  # nothing written so far is needed any more


def test_old_backfilled_event_times_are_needed_as_long_as_recent_ones():
    """Whatever the event times, only stream time moving on releases a span."""
    thirty_days_ago = 1_700_000_000_000
    horizon = ChangelogHorizon(MARGIN, end=0)
    horizon.committed(50, stream_time=thirty_days_ago, newest_written=thirty_days_ago)
    horizon.committed(90, stream_time=thirty_days_ago + 1_000, newest_written=thirty_days_ago)
    assert horizon.needed().needed_from == 0


def test_a_restart_resumes_from_the_committed_needed_offset():
    horizon = ChangelogHorizon(MARGIN, end=0)
    horizon.committed(10, stream_time=10_000, newest_written=10_000)
    horizon.committed(20, stream_time=20_000, newest_written=20_000)
    recorded = horizon.needed()
    metadata = CommitMetadata.decode(CommitMetadata(20_000, {}, {("cl", 0): recorded}).encode())
    assert metadata.known and metadata.needed[("cl", 0)] == recorded

    resumed = ChangelogHorizon(MARGIN, end=20)
    resumed.resume(metadata.needed[("cl", 0)])
    assert resumed.needed().needed_from == 0
    resumed.committed(25, stream_time=21_000, newest_written=21_000)
    assert resumed.needed().needed_from == 0
    # Released only once stream time has passed every window the resumed span may hold.
    resumed.committed(25, stream_time=40_001, newest_written=20_001 + MARGIN)
    assert resumed.needed().needed_from == 20


def test_many_commits_are_merged_into_a_bounded_number_of_spans():
    horizon = ChangelogHorizon(MARGIN, end=0)
    for i in range(1, 10_001):
        horizon.committed(i, stream_time=i * 10, newest_written=i * 10)
    assert len(horizon._spans) <= 2 * MARGIN // (MARGIN // 32) + 2
    needed = horizon.needed()
    # Conservative: never later than the exact answer (the first offset of a live window).
    exact_first_live = next(i for i in range(1, 10_001) if i * 10 + 1 + MARGIN > 100_000) - 1
    assert needed.needed_from <= exact_first_live


def test_metadata_from_before_tracking_decodes_as_unknown():
    old = 'fluvial:{"st":5,"cl":[["t",0,3]]}'
    metadata = CommitMetadata.decode(old)
    assert metadata.stream_time == 5 and not metadata.known and metadata.needed == {}
