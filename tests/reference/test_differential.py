"""fluvial against Kafka Streams: the same topology on the same input, output compared byte for byte.

For every case the test writes one seeded input to a single-partition topic, runs the Kafka
Streams reference app (``reference/``) and fluvial's twin of its topology on it side by side,
both under exactly-once with the record cache off, and compares their output topics
(read_committed).

What is compared: every output record in offset order, with its key and value bytes, its
timestamp and its headers. With one input partition both engines process records in the
topic's offset order (join sides share the topic for that reason), and with caching off every
update is its own revision, so the whole sequence is determined by the semantics. Timestamps are
part of those semantics: Kafka Streams gives each result a timestamp by its own rules (the
largest contributing timestamp for aggregates and joins, the stream record's for a stream-table
join) and fluvial promises the same.

One setting of the reference is not Kafka Streams' default: left and outer stream-stream joins
check for closed windows on every record instead of at most once a second of wall-clock time
(see ``ReferenceApp.config``), since a wall-clock throttle would make the reference's output
depend on how fast it runs. fluvial always checks on every record.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial import StreamsBuilder, StreamsConfig
from tests.reference.reference_app import ReferenceRun, produce, run_fluvial
from tests.reference.topologies import CASES, Case
from tests.runtime.harness import read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 20260511
RECORDS = 300
TIMEOUT_S = 180

Revision = tuple[bytes | None, bytes | None, int, tuple[tuple[str, bytes], ...]]


def revisions(bootstrap: str, topic: str) -> list[Revision]:
    return [
        (msg.key(), msg.value(), msg.timestamp()[1], tuple(msg.headers() or ()))
        for msg in read_topic(bootstrap, topic)
    ]


def show(case: Case, revision: Revision) -> str:
    key, value, timestamp, headers = revision
    shown_key = None if key is None else case.show_key(key)
    shown_value = None if value is None else case.show_value(value)
    return f"{shown_key!r} -> {shown_value!r} @{timestamp}" + (f" {headers}" if headers else "")


def assert_same_revisions(case: Case, actual: list[Revision], expected: list[Revision]) -> None:
    """Equal sequences, or a message showing where fluvial first departs from Kafka Streams."""
    if actual == expected:
        return
    first = next(
        (i for i, (a, e) in enumerate(zip(actual, expected, strict=False)) if a != e),
        min(len(actual), len(expected)),
    )
    lo, hi = max(0, first - 3), first + 4
    lines = [
        f"{case.name}: fluvial wrote {len(actual)} records, Kafka Streams {len(expected)}; "
        f"the first difference is at offset-order index {first}",
        "  Kafka Streams:",
        *(f"    {i}: {show(case, r)}" for i, r in enumerate(expected[lo:hi], lo)),
        "  fluvial:",
        *(f"    {i}: {show(case, r)}" for i, r in enumerate(actual[lo:hi], lo)),
    ]
    pytest.fail("\n".join(lines), pytrace=False)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_output_matches_kafka_streams(
    case: Case,
    reference_jar: Path,
    bootstrap_servers: str,
    topic_factory,  # noqa: ANN001
    unique_name,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    input_topic = topic_factory("in")
    fluvial_output = topic_factory("fluvial-out")
    reference_output = topic_factory("reference-out")
    # Everything is in the topic before either engine starts, so neither sees a partial input.
    produce(bootstrap_servers, input_topic, case.make_input(SEED, RECORDS))

    reference = ReferenceRun(
        reference_jar, case.name, bootstrap_servers, input_topic, reference_output,
        unique_name("ref"), tmp_path / "reference.log",
    ).start()  # fmt: skip
    builder = StreamsBuilder()
    case.build(builder, input_topic, fluvial_output)
    config = StreamsConfig(
        application_id=unique_name("fluvial"),
        bootstrap_servers=bootstrap_servers,
        processing_guarantee="exactly_once_v2",
        commit_interval_ms=100,
        cache_max_bytes=0,
        state_dir=str(tmp_path / "state"),
        # Compared with Kafka Streams: its stream-time rule across repartition topics.
        catch_up_completeness=False,
    )
    try:
        run_fluvial(builder.build(), config, input_topic, TIMEOUT_S)
    finally:
        reference.wait(TIMEOUT_S)

    expected = revisions(bootstrap_servers, reference_output)
    actual = revisions(bootstrap_servers, fluvial_output)
    assert expected, f"{case.name}: Kafka Streams wrote nothing; the input exercises nothing"
    assert_same_revisions(case, actual, expected)
