"""The fault matrix on three brokers: kill -9 of the app and of a partition leader, a SIGSTOP
zombie, while input flows. The verifier checks every committed record against the input."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.verify.matrix import VerifyReport, run_matrix, verify_outputs

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_exactly_once_under_every_fault(tmp_path: Path) -> None:
    report = run_matrix(seed=42, records=3000, fault_count=6, commit_interval_ms=300,
                        work_dir=tmp_path)  # fmt: skip
    assert report.faults.count("kill-app") >= 2
    assert "zombie" in report.faults and "kill-broker" in report.faults
    assert report.records == 3000
    assert (report.duplicates, report.lost, report.bad_revisions, report.wrong_finals) == (
        0, 0, 0, 0,
    ), report.problems  # fmt: skip
    assert report.verdict == "PASS"


def test_kills_inside_long_open_transactions(tmp_path: Path) -> None:
    """A 5 s commit interval: every kill lands with a transaction open."""
    report = run_matrix(seed=7, records=2000, faults=("kill-app",), fault_count=4,
                        commit_interval_ms=5000, work_dir=tmp_path)  # fmt: skip
    assert report.verdict == "PASS", (report.summary(), report.problems)


def test_at_least_once_loses_nothing(tmp_path: Path) -> None:
    report = run_matrix(seed=3, records=2000, guarantee="at_least_once", fault_count=3,
                        faults=("kill-app", "kill-broker"), commit_interval_ms=1000,
                        work_dir=tmp_path)  # fmt: skip
    assert report.lost == 0 and report.wrong_finals == 0, report.problems
    assert report.verdict == "PASS"


def test_the_verifier_catches_a_duplicate(bootstrap_servers: str, topic_factory) -> None:
    """The checker itself must fail on a doubled echo record and a skipped revision."""
    from confluent_kafka import Producer

    from fluvial import serdes

    long = serdes.long()
    inp, echo, agg = topic_factory("in"), topic_factory("echo"), topic_factory("agg")
    producer = Producer({"bootstrap.servers": bootstrap_servers})
    for topic in (inp, echo):
        producer.produce(topic, key=b"k1", value=long.serialize(None, 5))
    producer.produce(echo, key=b"k1", value=long.serialize(None, 5))  # a duplicate
    producer.produce(agg, key=b"k1", value=b'{"sum": 5, "count": 1, "min": 5, "max": 5}')
    producer.produce(agg, key=b"k1", value=b'{"sum": 10, "count": 2, "min": 5, "max": 5}')
    assert producer.flush(10) == 0
    report = VerifyReport(0, "exactly_once_v2", "local", 0)
    verify_outputs(bootstrap_servers, inp, echo, agg, True, report)
    assert report.duplicates == 1 and report.bad_revisions == 1 and report.wrong_finals == 1
    assert report.verdict == "FAIL"
