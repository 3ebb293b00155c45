"""fluvial.spark.PostgresSink: each micro-batch lands in PostgreSQL exactly once."""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fluvial.errors import ConfigError
from fluvial.spark import PostgresSink, SinkError
from tests.runtime.harness import wait_until
from tests.sinks.conftest import query

pytestmark = [pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]


def test_a_replayed_batch_is_skipped_and_stale_staging_rows_never_land(
    spark, pg_dsn: str, table_name
) -> None:
    table = table_name("spark")
    sink = PostgresSink(table, dsn=pg_dsn, sink_id=table)
    moment = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    first = spark.createDataFrame(
        [(f"k{i}", i, moment.astimezone().replace(tzinfo=None)) for i in range(100)],
        "key string, n bigint, at timestamp",
    ).repartition(3)

    assert sink(first, 0).rows_written == 100
    # Spark replays batch 0 after a driver restart: nothing is written twice.
    assert sink(first, 0).skipped
    # A task attempt that staged rows and then lost (a zombie) leaves them behind: never read.
    stage = sink.stage_parts[-1]
    query(pg_dsn, f"INSERT INTO {stage} (key, n, at, fluvial_batch, fluvial_partition, "
                  "fluvial_attempt) VALUES ('zombie', -1, now(), 1, 0, 999999)")  # fmt: skip
    second = spark.createDataFrame([("k100", 100, None)], "key string, n bigint, at timestamp")
    assert sink(second, 1).rows_written == 1

    rows = query(pg_dsn, f"SELECT key, n, at FROM {table}")
    assert sorted(n for _k, n, _a in rows) == list(range(101))
    assert {a for _k, n, a in rows if n < 100} == {moment}  # timestamps land as instants
    assert query(pg_dsn, f"SELECT count(*) FROM {stage}") == [(0,)]
    assert query(pg_dsn, "SELECT batch_id, rows FROM fluvial_spark_batches WHERE sink_id = %s "
                         "ORDER BY 1", [table]) == [(0, 100), (1, 1)]  # fmt: skip
    with pytest.raises(SinkError, match="already committed batch 1"):
        sink(first, 0)  # a checkpoint older than the sink's batches


def test_upsert_replaces_rows_by_key_and_refuses_two_rows_for_one_key(
    spark, pg_dsn: str, table_name
) -> None:
    table = table_name("counts")
    sink = PostgresSink(table, dsn=pg_dsn, sink_id=table, mode="upsert", key_columns=["key"])
    sink(spark.createDataFrame([("a", 1), ("b", 1)], "key string, n bigint"), 0)
    sink(spark.createDataFrame([("a", 5), ("c", 2)], "key string, n bigint"), 1)
    assert dict(query(pg_dsn, f"SELECT key, n FROM {table}")) == {"a": 5, "b": 1, "c": 2}
    twice = spark.createDataFrame([("a", 6), ("a", 7)], "key string, n bigint")
    with pytest.raises(SinkError, match="several rows for one key"):
        sink(twice, 2)
    assert dict(query(pg_dsn, f"SELECT key, n FROM {table}")) == {"a": 5, "b": 1, "c": 2}


def test_a_row_postgres_rejects_fails_the_whole_batch(spark, pg_dsn: str, table_name) -> None:
    table = table_name("checked")
    query(pg_dsn, f"CREATE TABLE {table} (key text, n bigint CHECK (n >= 0))")
    sink = PostgresSink(table, dsn=pg_dsn, sink_id=table)
    with pytest.raises(SinkError, match="a row of batch 0 cannot be written .*check constraint"):
        sink(spark.createDataFrame([("a", 1), ("b", -1)], "key string, n bigint"), 0)
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(0,)]


def test_columns_the_sink_cannot_write_are_refused_before_writing(spark, pg_dsn) -> None:
    df = spark.createDataFrame([(1, [1, 2])], "id bigint, tags array<int>")
    with pytest.raises(ConfigError, match="column 'tags' has type array<int>"):
        PostgresSink("t", dsn=pg_dsn, sink_id="s")(df, 0)
    with pytest.raises(ConfigError, match="needs key_columns"):
        PostgresSink("t", dsn=pg_dsn, sink_id="s", mode="upsert")


@pytest.mark.kafka
@pytest.mark.slow
def test_a_streaming_query_killed_mid_batch_and_restarted_writes_each_record_once(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    topic = topic_factory("events", partitions=2)
    table = table_name("stream")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    sent = [f"e{i}" for i in range(1500)]
    for i, value in enumerate(sent):
        producer.produce(topic, key=f"k{i % 10}".encode(), value=value.encode())
    assert producer.flush(30) == 0
    progress = tmp_path / "progress"
    args = [sys.executable, "-m", "tests.sinks.spark_pg_query", "--bootstrap", bootstrap_servers,
            "--input", topic, "--checkpoint", str(tmp_path / "ckpt"), "--dsn", pg_dsn,
            "--table", table, "--sink-id", table, "--max-offsets", "150",
            "--progress", str(progress)]  # fmt: skip

    def start(*extra: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"query-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        return subprocess.Popen([*args, *extra], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ})  # fmt: skip

    runs: list[subprocess.Popen[bytes]] = []
    try:
        # 1. Killed right after the sink committed batch 2, before Spark recorded it: a replay.
        runs.append(start("--crash-after-batch", "2", "--crash-flag", str(tmp_path / "crashed")))
        assert runs[-1].wait(300) == -signal.SIGKILL
        # 2. Killed at a random moment while it writes.
        runs.append(start())
        wait_until(lambda: progress.read_text().count("done") >= 4, 300, "more batches")
        time.sleep(random.Random(3).uniform(0.0, 1.0))
        os.killpg(runs[-1].pid, signal.SIGKILL)
        runs[-1].wait(60)
        # 3. Runs to the end.
        runs.append(start())
        assert runs[-1].wait(300) == 0
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(60)

    events = progress.read_text().split("\n")
    assert "skipped 2" in events, "batch 2 was replayed after the crash and must be skipped"
    rows = query(pg_dsn, f'SELECT value, partition, "offset" FROM {table}')
    values = sorted(v for v, _p, _o in rows)
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == sorted(v.upper() for v in sent)
