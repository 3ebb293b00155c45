"""q11–q22 in fluvial's TopologyTestDriver and their Kafka Streams twins in Kafka Streams' own
TopologyTestDriver (``reference/``, ``nexmark.TestDriverMain``), on the same input: the same
output records, byte for byte and in the same order (both drivers run one partition, record
cache off, so every revision is there). q12 counts in processing time, which differs between
any two runs: its windows are checked to add up to the same bids per bidder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial import children
from fluvial.bench.nexmark.queries import QUERIES, q12, q13
from fluvial.jvm import java_executable
from fluvial.verify.differential.reference import build_reference_jar
from tests.bench.nexmark.drive import START_MS, TOPICS, final, generated, key, kind, run

N2_QUERIES = [f"q{n}" for n in range(11, 23)]


def twin_input() -> tuple[list[tuple[str, str, str]], list[dict]]:
    """The side input, then events over two days, across day and night hours, and a slow
    stretch in which bidders pause past a session's gap."""
    events = (
        generated(1500)
        + generated(700, seed=9, base_ms=START_MS + 14 * 3_600_000)
        + generated(600, seed=10, base_ms=START_MS + 20 * 3_600_000, rate=5)
    )
    side = [(q13.side_input_topic(TOPICS), k, v) for k, v in q13.side_input()]
    return side, events


def compact(value: object) -> str:
    """JSON as the Nexmark topics hold it: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


@pytest.fixture(scope="module")
def kafka_streams_outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple]]:
    jar = build_reference_jar()
    side, events = twin_input()
    work = tmp_path_factory.mktemp("nexmark-twins")
    lines = [
        {"topic": topic, "key": k, "value": compact(v), "timestamp": 0} for topic, k, v in side
    ]
    lines += [
        {
            "topic": TOPICS[kind(e)],
            "key": key(e),
            "value": json.dumps(e),
            "timestamp": e["dateTime"],
        }
        for e in events
    ]
    (work / "input.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    main = "dev.fluvial.reference.nexmark.TestDriverMain"
    cmd = [java_executable(), "-Xmx256m", "-XX:+UseSerialGC", "-cp", str(jar), main,
           str(work / "input.jsonl"), str(work / "out"), *N2_QUERIES]  # fmt: skip
    done = children.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    outputs = {}
    for query in N2_QUERIES:
        rows = (work / "out" / f"{query}.jsonl").read_text().splitlines()
        outputs[query] = [tuple(json.loads(row).values()) for row in rows]
    return outputs


@pytest.mark.slow
@pytest.mark.parametrize("query", [q for q in N2_QUERIES if q != "q12"])
def test_fluvial_writes_what_kafka_streams_writes(query: str, kafka_streams_outputs) -> None:
    side, events = twin_input()
    records = run(QUERIES[query], events, before=side, raw=True)
    ours = [(r.key, r.value, r.timestamp_ms) for r in records]
    theirs = kafka_streams_outputs[query]
    assert len(ours) > 50
    assert ours == theirs


@pytest.mark.slow
def test_q12_windows_add_up_to_the_same_bids_per_bidder(kafka_streams_outputs) -> None:
    _, events = twin_input()
    theirs = {k: json.loads(v) for k, v, _ in kafka_streams_outputs["q12"] if v is not None}
    ours = final(run(q12, events))
    assert q12.per_bidder(theirs) == q12.per_bidder(ours) == q12.oracle(events)
    assert q12.per_bidder(theirs)


def test_every_query_has_a_kafka_streams_twin() -> None:
    java = Path(__file__).parents[3] / "reference/src/main/java/dev/fluvial/reference/nexmark"
    registry = (java / "Queries.java").read_text()
    for query in N2_QUERIES:
        assert f'ALL.put("{query}", Q{query[1:]}::build);' in registry
        assert query in QUERIES
