"""Nexmark q11, user sessions: how many bids each bidder made in each of its sessions.

SQL (Flink's Nexmark)::

    SELECT B.bidder, count(*) AS bid_count,
           SESSION_START(B.dateTime, INTERVAL '10' SECOND) AS starttime,
           SESSION_END(B.dateTime, INTERVAL '10' SECOND) AS endtime
    FROM bid B
    GROUP BY B.bidder, SESSION(B.dateTime, INTERVAL '10' SECOND)

Mapping: bids re-keyed by bidder (a repartition), session windows of a 10 s inactivity gap and
30 s of grace, ``count``, then each session as one row:

- key ``{"bidder": b, "start": s, "end": e}`` (compact JSON), ``s`` and ``e`` the times of the
  session's first and last bid, as Kafka Streams bounds a session;
- value ``{"bidder": b, "bid_count": n, "starttime": s, "endtime": e + 10000}``: the SQL's
  ``SESSION_END`` is the last bid plus the gap.

What differs from the SQL:

- Revisions: every bid updates its session's row at once (unless the record cache holds it
  back), where the SQL emits a session when the watermark passes its end. When a bid extends
  or merges sessions, the rows of the replaced sessions are deleted (a null value). The final
  value per key is the SQL's row; a deleted session's key ends on null.
- Two bids exactly 10 s apart share a session (Kafka Streams' gap is inclusive); Flink's
  session windows would split them.
- A bid more than 30 s of grace behind its bidder's stream time is dropped, and counted. On
  a pre-loaded input Kafka Streams' stream time behind the re-key follows the fastest input
  partition and drops slower ones' bids as late once the input spans more than 40 s of event
  time; fluvial's does not (catch-up completeness).

:func:`oracle` returns ``{key text: value}`` for the sessions that remain.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fluvial import KeyValue, SessionWindows, StreamsBuilder, serdes
from fluvial.bench.nexmark.queries._columns import bids, key_text

GAP_MS = 10_000
#: Bids of one bidder come through a repartition from every input partition, each at its own
#: pace. fluvial's stream time there waits for the slowest (docs/semantics.md, catch-up
#: completeness); Kafka Streams' follows the fastest, so on a backlog it drops the slower
#: partitions' bids once they are more than gap + grace (40 s) behind.
GRACE_MS = 30_000


def _row(session: Any, count: int | None) -> tuple[dict[str, int], dict[str, int] | None]:
    bidder, window = session.key, session.window
    key = {"bidder": bidder, "start": window.start_ms, "end": window.end_ms}
    if count is None:  # a session merged into another one
        return key, None
    return key, {
        "bidder": bidder,
        "bid_count": count,
        "starttime": window.start_ms,
        "endtime": window.end_ms + GAP_MS,
    }


def build(builder: StreamsBuilder, topics: dict[str, str], output: str) -> None:
    (
        builder.stream(topics["bid"], key_serde=serdes.string(), value_serde=serdes.json())
        # Only the bidder counts: the repartition carries no more than it needs.
        .map(lambda auction, bid: KeyValue(bid["bidder"], bid["auction"]))
        .group_by_key(key_serde=serdes.long(), value_serde=serdes.long())
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(GAP_MS, GRACE_MS))
        .count()
        .to_stream()
        .map(_row)
        .to(output, key_serde=serdes.json(), value_serde=serdes.json())
    )


def oracle(events: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    times: dict[int, list[int]] = defaultdict(list)
    for bid in bids(events):
        times[bid["bidder"]].append(bid["dateTime"])
    result: dict[str, dict[str, int]] = {}
    for bidder, stamps in times.items():
        stamps.sort()
        start = previous = stamps[0]
        count = 0
        for stamp in stamps:
            if stamp - previous > GAP_MS:
                _add_session(result, bidder, start, previous, count)
                start, count = stamp, 0
            previous = stamp
            count += 1
        _add_session(result, bidder, start, previous, count)
    return result


def _add_session(
    result: dict[str, dict[str, int]], bidder: int, start: int, end: int, count: int
) -> None:
    key = key_text({"bidder": bidder, "start": start, "end": end})
    result[key] = {
        "bidder": bidder,
        "bid_count": count,
        "starttime": start,
        "endtime": end + GAP_MS,
    }
