"""fluvial against Kafka Streams on real partitions: generated cases on the session's Kafka.

Each case's input goes to 3-partition topics through a producer with Java's partitioner; one
Kafka Streams JVM runs every case's ``KafkaStreams`` application while fluvial's local engine runs
the same topologies in this process, all of a batch at once. Per output topic, the final value
per key (tables) or the multiset of records per key (streams), and each key's partition, must be
the same (see ``fluvial.verify.differential.cluster``), except the differences still open
(``OPEN_DIFFERENCES`` there, listed in docs/semantics.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial.verify.differential.cluster import ClusterReference, ClusterSession
from fluvial.verify.differential.generate import PARTITIONED_FEATURES, generate_partitioned_case
from fluvial.verify.differential.session import describe
from fluvial.verify.differential.table_ahead import generate_partitioned_table_ahead_case
from tests import processes

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

SEED = 20261128
CASES = 2 * len(PARTITIONED_FEATURES)  # every feature twice: 22 cases


def test_partitioned_cases_match_kafka_streams(
    reference_jar: Path, bootstrap_servers: str, tmp_path: Path
) -> None:
    cases = [generate_partitioned_case(SEED, i) for i in range(CASES)]
    # What the cases draw, so that a change to the generator cannot quietly drop a kind.
    ops = {n["op"] for case in cases for n in case["nodes"]}
    assert {"select_key", "map", "group_by", "st_join", "ss_join", "tt_join", "fk_join",
            "sg_join", "cogroup", "table_group_by", "windowed_by"} <= ops  # fmt: skip
    assert {case["input_mode"] for case in cases} == {"backlog", "paced"}

    with ClusterReference() as reference:
        processes.adopt(reference.pid, "the Kafka Streams runner of partitioned cases")
        session = ClusterSession(
            bootstrap_servers, reference, partitions=3, concurrency=len(PARTITIONED_FEATURES),
            state_root=tmp_path, settled=True,
        )  # fmt: skip
        comparisons = session.compare_cases(cases)

    assert sum(c.records for c in comparisons) > 10 * CASES, "the cases compared almost nothing"
    different = [(case, c) for case, c in zip(cases, comparisons, strict=True) if not c.same]
    assert not different, "\n\n".join(
        f"{c.case_id}: {'; '.join(c.differences)}\n{describe(case)}" for case, c in different
    )


TABLE_AHEAD_CASES = 5


def test_partitioned_table_ahead_cases_match_kafka_streams(
    reference_jar: Path, bootstrap_servers: str, tmp_path: Path
) -> None:
    """Tables 20 minutes ahead of their streams (``table_ahead``), joined, then stateless
    operators or a windowed aggregate in the join's task or behind a re-key, on 3 partitions."""
    cases = [generate_partitioned_table_ahead_case(SEED, i) for i in range(TABLE_AHEAD_CASES)]
    ops = {n["op"] for case in cases for n in case["nodes"]}
    assert {"st_join", "sg_join", "windowed_by"} <= ops

    with ClusterReference() as reference:
        processes.adopt(reference.pid, "the Kafka Streams runner of table-ahead cases")
        session = ClusterSession(
            bootstrap_servers, reference, partitions=3, concurrency=4, state_root=tmp_path,
            settled=True,
        )  # fmt: skip
        comparisons = session.compare_cases(cases)

    assert sum(c.records for c in comparisons) > 5 * TABLE_AHEAD_CASES
    different = [(case, c) for case, c in zip(cases, comparisons, strict=True) if not c.same]
    assert not different, "\n\n".join(
        f"{c.case_id}: {'; '.join(c.differences)}\n{describe(case)}" for case, c in different
    )
    print(f"{TABLE_AHEAD_CASES} partitioned table-ahead cases, "
          f"{sum(c.records for c in comparisons)} records compared")  # fmt: skip
