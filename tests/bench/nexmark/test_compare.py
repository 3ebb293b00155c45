"""q0–q22 on fluvial and on Kafka Streams, on the same 3-partition input: equal committed
outputs, and fluvial's equal to each query's oracle.

Two comparison runs (q0–q9, q11–q22): in each, every query's fluvial application runs in this
process and every twin in one Kafka Streams JVM, all at once, so a run costs two launches, not
twenty.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.bench.nexmark.compare import run_comparison

pytestmark = [pytest.mark.slow, pytest.mark.kafka]

QUERIES = [f"q{i}" for i in range(10)]


def test_q0_to_q9_equal_kafka_streams_and_their_oracles(
    bootstrap_servers: str, reference_jar: Path, tmp_path: Path
) -> None:
    # 100 events/s of event time: 4,000 events span 40 s, so windows and auctions close.
    results = run_comparison(
        QUERIES, events=4_000, partitions=3, bootstrap=bootstrap_servers, jar=reference_jar,
        seed=25, rate=100, work_dir=tmp_path, timeout_s=420, say=lambda line: None,
    )  # fmt: skip

    failed = [r for r in results if not r.ok]
    report = "\n".join(
        f"{r.query}: " + "; ".join(r.with_kafka_streams + r.with_oracle) for r in failed
    )
    assert not failed, report
    # Every query has results on both sides (the comparison is not vacuous).
    for r in results:
        assert r.keys > 0 and r.fluvial_records > 0 and r.kafka_streams_records > 0, r.as_dict()


def test_q11_to_q22_equal_kafka_streams_and_their_oracles(
    bootstrap_servers: str, reference_jar: Path, tmp_path: Path
) -> None:
    # 100 events/s: a bid and its auction stay within q20's 20 s join window, and the input's
    # 30 s stay within q11's 40 s (gap and grace), past which Kafka Streams' stream time (the
    # fastest writer's) would drop the slower input partitions' bids. q12 compares by bids per
    # bidder (its windows are processing time); the comparison writes q13's side input.
    queries = [f"q{i}" for i in range(11, 23)]
    results = run_comparison(
        queries, events=3_000, partitions=3, bootstrap=bootstrap_servers, jar=reference_jar,
        seed=26, rate=100, work_dir=tmp_path, timeout_s=420, say=lambda line: None,
    )  # fmt: skip

    failed = [r for r in results if not r.ok]
    report = "\n".join(
        f"{r.query}: " + "; ".join(r.with_kafka_streams + r.with_oracle) for r in failed
    )
    assert not failed, report
    assert [r.query for r in results] == queries
    for r in results:
        assert r.keys > 0 and r.fluvial_records > 0 and r.kafka_streams_records > 0, r.as_dict()
