"""``fluvial verify --differential N``: generate N cases, run both sides, compare, shrink.

Cases run in batches: one JVM per batch runs Kafka Streams' side while this process runs
fluvial's, so the two sides overlap. Every case that differs is shrunk to a minimal case.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluvial.verify.differential.generate import feature_tags, generate_case
from fluvial.verify.differential.run import Comparison, ReferenceProcess, compare, run_fluvial
from fluvial.verify.differential.shrink import shrink

TABLE_HEADER = ("feature", "cases", "records compared", "differences")


@dataclass
class FeatureRow:
    cases: int = 0
    records: int = 0
    differences: int = 0  # cases with at least one difference


@dataclass
class Failure:
    case: dict[str, Any]
    comparison: Comparison
    minimal: dict[str, Any] | None = None
    minimal_comparison: Comparison | None = None


@dataclass
class DifferentialReport:
    seed: int
    cases: int = 0
    records: int = 0
    features: dict[str, FeatureRow] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def verdict(self) -> str:
        return "PASS" if not self.failures else "FAIL"

    def table_rows(self) -> list[tuple[str, str, str, str]]:
        rows = [
            (tag, str(row.cases), str(row.records), str(row.differences))
            for tag, row in sorted(self.features.items())
        ]
        rows.append(("all", str(self.cases), str(self.records), str(len(self.failures))))
        return rows

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "cases": self.cases,
            "records_compared": self.records,
            "wall_s": round(self.wall_s, 1),
            "verdict": self.verdict,
            "features": {
                tag: {"cases": r.cases, "records": r.records, "differences": r.differences}
                for tag, r in sorted(self.features.items())
            },
            "failures": [
                {
                    "id": f.case["id"],
                    "differences": f.comparison.differences,
                    "minimal_case": f.minimal,
                    "minimal_differences": (
                        f.minimal_comparison.differences if f.minimal_comparison else None
                    ),
                }
                for f in self.failures
            ],
        }


def compare_cases(reference: ReferenceProcess, cases: list[dict[str, Any]]) -> list[Comparison]:
    """Both sides of every case, the JVM working beside this process."""
    with ThreadPoolExecutor(1) as pool:
        theirs_future = pool.submit(reference.run, cases)
        ours = [run_fluvial(case) for case in cases]
        theirs = theirs_future.result()
    return [compare(e, a) for e, a in zip(theirs, ours, strict=True)]


def shrink_case(reference: ReferenceProcess, case: dict[str, Any]) -> dict[str, Any]:
    """``case`` reduced to a minimal one that still differs."""
    return shrink(case, lambda variants: [not c.same for c in compare_cases(reference, variants)])


def run_differential(
    count: int,
    seed: int,
    *,
    batch_size: int = 250,
    shrink_failures: bool = True,
    max_shrunk: int = 10,
    settled: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
) -> DifferentialReport:
    """Generate ``count`` cases from ``seed``, compare each, shrink the first ``max_shrunk``
    that differ. ``settled`` leaves out the grammar's areas with open differences."""
    with ReferenceProcess() as reference:
        return _run(
            reference, count, seed, batch_size, shrink_failures, max_shrunk, settled, progress
        )


def _run(
    reference: ReferenceProcess,
    count: int,
    seed: int,
    batch_size: int,
    shrink_failures: bool,
    max_shrunk: int,
    settled: bool,
    progress: Callable[[str], None],
) -> DifferentialReport:
    started = time.monotonic()
    report = DifferentialReport(seed)
    for start in range(0, count, batch_size):
        end = min(count, start + batch_size)
        cases = [generate_case(seed, i, settled=settled) for i in range(start, end)]
        for case, comparison in zip(cases, compare_cases(reference, cases), strict=True):
            _count(report, case, comparison)
        progress(
            f"{report.cases}/{count} cases, {len(report.failures)} differ "
            f"({time.monotonic() - started:.0f} s)"
        )
    if shrink_failures:
        for failure in report.failures[:max_shrunk]:
            progress(f"shrinking case {failure.case['id']}")
            failure.minimal = shrink_case(reference, failure.case)
            failure.minimal_comparison = compare_cases(reference, [failure.minimal])[0]
    report.wall_s = time.monotonic() - started
    return report


def run_partitioned_differential(
    count: int,
    seed: int,
    bootstrap: str,
    *,
    partitions: int = 3,
    engine: str = "local",
    spark: Any = None,
    concurrency: int = 10,
    shrink_failures: bool = True,
    max_shrunk: int = 3,
    shrink_budget_s: float = 300.0,
    progress: Callable[[str], None] = lambda _msg: None,
) -> DifferentialReport:
    """Generate ``count`` partitioned cases from ``seed`` and run each on the cluster at
    ``bootstrap`` (topics of ``partitions`` partitions) in Kafka Streams and in fluvial's
    ``engine``; shrink the first ``max_shrunk`` that differ, each for at most
    ``shrink_budget_s`` (a round of variants on a cluster takes tens of seconds), see
    :mod:`.cluster`."""
    from fluvial.verify.differential.cluster import ClusterReference, ClusterSession
    from fluvial.verify.differential.generate import generate_partitioned_case

    if partitions < 1:
        raise ValueError(f"--partitions needs at least 1 partition, got {partitions}")
    started = time.monotonic()
    report = DifferentialReport(seed)
    with ClusterReference() as reference, tempfile.TemporaryDirectory(prefix="fluvial-dp-") as tmp:
        session = ClusterSession(bootstrap, reference, partitions=partitions, engine=engine,
                                 spark=spark, concurrency=concurrency, state_root=Path(tmp))  # fmt: skip
        for start in range(0, count, concurrency):
            cases = [
                generate_partitioned_case(seed, i)
                for i in range(start, min(count, start + concurrency))
            ]
            for case, comparison in zip(cases, session.compare_cases(cases), strict=True):
                _count(report, case, comparison)
            progress(
                f"{report.cases}/{count} cases, {len(report.failures)} differ "
                f"({time.monotonic() - started:.0f} s)"
            )
        if shrink_failures:
            for failure in report.failures[:max_shrunk]:
                progress(f"shrinking case {failure.case['id']}")
                deadline = time.monotonic() + shrink_budget_s

                def oracle(
                    variants: list[dict[str, Any]], deadline: float = deadline
                ) -> list[bool]:
                    if time.monotonic() > deadline:  # out of budget: keep what was found
                        return [False] * len(variants)
                    return [not c.same for c in session.compare_cases(variants)]

                failure.minimal = shrink(failure.case, oracle)
                failure.minimal_comparison = session.compare_cases([failure.minimal])[0]
    report.wall_s = time.monotonic() - started
    return report


def _count(report: DifferentialReport, case: dict[str, Any], comparison: Comparison) -> None:
    report.cases += 1
    report.records += comparison.records
    tags = feature_tags(case)
    if case.get("input_mode"):
        tags.append(f"input:{case['input_mode']}")
    for tag in tags:
        row = report.features.setdefault(tag, FeatureRow())
        row.cases += 1
        row.records += comparison.records
        row.differences += 0 if comparison.same else 1
    if not comparison.same:
        report.failures.append(Failure(case, comparison))


def describe(case: dict[str, Any]) -> str:
    """A case as text: its operators, then its input records."""
    mode = f", {case['input_mode']} input" if case.get("input_mode") else ""
    lines = [f"case {case['id']} ({case.get('feature')}, {case.get('store_type')} stores{mode})"]
    for node in case["nodes"]:
        skip = {"id", "op", "in", "shape"}
        fields = ", ".join(f"{k}={v}" for k, v in node.items() if k not in skip and v is not None)
        lines.append(f"  {node['id']} = {node['op']}({', '.join(node.get('in', []))}) {fields}")
    lines.append("  inputs (topic, key, value, timestamp):")
    lines.extend(f"    {r}" for r in case["inputs"])
    return "\n".join(lines)
