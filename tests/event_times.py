"""Event times for tests that run on a real broker.

The broker applies a changelog's time retention from the timestamps of its records, so event
times far in the past (1970) have changelog segments deleted under a running test. Tests that
write through a real broker take their event times from here: near the wall clock, aligned to
a whole minute so that window boundaries in the expected output stay readable.
"""

from __future__ import annotations

import time

DAY_MS = 24 * 60 * 60 * 1000


def event_time_base_ms(*, days_ago: float = 0.0, align_ms: int = 60_000) -> int:
    """A start for a test's event times: ``days_ago`` before now, aligned down to ``align_ms``.

    The default starts ten minutes back, so a test's input (usually minutes of event time)
    stays behind the wall clock and never trips the broker's limit on future timestamps.
    """
    now = int(time.time() * 1000) - int(days_ago * DAY_MS) - 10 * 60_000
    return now - now % align_ms
