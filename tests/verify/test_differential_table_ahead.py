"""fluvial against Kafka Streams (its compatible mode) on cases whose tables' timestamps run
20 minutes ahead of their streams (``fluvial.verify.differential.table_ahead``): a stream-table
or stream-global-table join, then stateless operators or a windowed aggregate in the join's
task or behind a re-key. Both test drivers, no broker; every output record and store row must
be the same."""

from __future__ import annotations

import pytest

from fluvial.verify.differential.run import ReferenceProcess
from fluvial.verify.differential.session import compare_cases, describe
from fluvial.verify.differential.table_ahead import TABLE_AHEAD_MS, generate_table_ahead_case

pytestmark = pytest.mark.slow

CASES = 120
SEED = 20261202


def test_table_ahead_cases_match_kafka_streams() -> None:
    cases = [generate_table_ahead_case(SEED, i) for i in range(CASES)]
    ops = {n["op"] for case in cases for n in case["nodes"]}
    assert {"st_join", "sg_join", "windowed_by", "select_key", "group_by_key"} <= ops
    assert any(n.get("store_kind") == "versioned" for case in cases for n in case["nodes"])
    for case in cases:  # every table record is ahead of every stream record
        kinds = {n["topic"]: n["op"] for n in case["nodes"] if "topic" in n and n["op"] != "to"}
        streams = [r[3] for r in case["inputs"] if kinds[r[0]] == "stream"]
        tables = [r[3] for r in case["inputs"] if kinds[r[0]] != "stream"]
        if streams and tables:
            assert min(tables) - max(streams) > TABLE_AHEAD_MS // 2

    with ReferenceProcess() as reference:
        comparisons = compare_cases(reference, cases)

    assert sum(c.records for c in comparisons) > 5 * CASES, "the cases compared almost nothing"
    different = [(case, c) for case, c in zip(cases, comparisons, strict=True) if not c.same]
    assert not different, f"{len(different)} of {CASES} cases differ\n\n" + "\n\n".join(
        f"{c.case_id}: {'; '.join(c.differences[:3])}\n{describe(case)}"
        for case, c in different[:3]
    )
    print(f"{CASES} table-ahead cases, {sum(c.records for c in comparisons)} records compared")
