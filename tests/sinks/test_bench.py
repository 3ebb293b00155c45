"""The PostgreSQL sink benchmark end to end on a tiny input: the harness works, not a speed."""

from __future__ import annotations

import pytest

from fluvial.bench.postgres_sink import WRITERS, run_postgres_sink_bench
from fluvial.bench.workloads import generate_input

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def test_every_writer_lands_every_record_and_is_compared_with_copy(
    bootstrap_servers: str, pg_dsn: str
) -> None:
    data = run_postgres_sink_bench(
        records=3000, partitions=2, batch=500, writers=list(WRITERS),
        bootstrap=bootstrap_servers, dsn=pg_dsn, say=lambda _line: None,
    )  # fmt: skip
    runs = {r["writer"]: r for r in data["runs"]}
    assert set(runs) == set(WRITERS)
    for name in ("insert-loop", "copy", "fluvial"):
        assert runs[name]["rows"] == 3000, name  # one row per record, none twice
    keys = {r.key for r in generate_input("passthrough", 3000, base_ms=0)}
    assert runs["fluvial-upsert"]["rows"] == len(keys)  # one row per key
    assert runs["fluvial-upsert"]["records"] == 3000
    assert runs["copy"]["vs_copy"] == 1.0
    assert all(r["rows_per_s"] > 0 for r in runs.values())
