"""Bugs the differential cases found, each kept as its minimal case: the topology, the input,
and the output and store contents Kafka Streams 4.3.1 produced for it (recorded with its
TopologyTestDriver through ``fluvial.verify.differential``). fluvial must produce the same,
record for record and byte for byte. No JVM is needed to run these.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial.verify.differential.run import compare, run_fluvial
from fluvial.verify.differential.session import describe

CASES = sorted((Path(__file__).parent / "differential_cases").glob("*.json"))


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_fluvial_matches_kafka_streams_on_minimal_case(path: Path) -> None:
    transcript = json.loads(path.read_text())
    case, expected = transcript["case"], transcript["kafka_streams"]
    assert expected.get("outputs"), "the recorded Kafka Streams result must show output"
    comparison = compare(expected, run_fluvial(case))
    assert comparison.same, f"{transcript['bug']}\n{describe(case)}\n" + "\n".join(
        comparison.differences
    )
