"""fluvial.spark.PostgresSink and bad rows: to the dead-letter topic exactly once, or a stop.

A bad row is one PostgreSQL refuses: a value that does not fit its column's type, or a
constraint of the table (NOT NULL, CHECK, unique, primary key). The table below decides, per
input row, what must happen to it.
"""

from __future__ import annotations

import contextlib
import json
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
from tests.runtime.harness import read_topic, wait_until
from tests.sinks.conftest import query

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]

#: The table every test writes: its types and constraints are what make rows bad.
TABLE = (
    "CREATE TABLE {table} (id bigint PRIMARY KEY, n integer CHECK (n >= 0), "
    "code char(3) NOT NULL, tag text UNIQUE DEFERRABLE INITIALLY DEFERRED{extra})"
)
#: id -> (n, code, tag) of the bad rows, and the words their reason must hold.
BAD = {
    7: (("twelve", "abc", "t7"), "column 'n': invalid input syntax for type integer"),
    8: (("99999999999", "abc", "t8"), "column 'n': value \"99999999999\" is out of range"),
    20: (("-1", "abc", "t20"), "violates check constraint"),
    30: (("3", None, "t30"), 'null value in column "code"'),
    40: (("4", "toolong", "t40"), "value too long for type character(3)"),
    50: (("5", "abc", "taken"), "duplicate key value violates unique constraint"),
    60: (("6", "abc", "t60"), "duplicate key value violates unique constraint"),  # id -1 below
    70: (("7", "a\x00c", "t70"), "holds a NUL character"),
}


def rows_for(ids: range) -> list[tuple]:
    """(id, n, code, tag) for ``ids``: the bad ones from BAD, the others good."""
    rows = []
    for i in ids:
        n, code, tag = BAD[i][0] if i in BAD else (str(i), "abc", f"t{i}")
        rows.append((-1 if i == 60 else i, n, code, tag))
    return rows


def make_table(pg_dsn: str, table: str, extra: str = "") -> None:
    query(pg_dsn, TABLE.format(table=table, extra=extra))
    # Rows already in the table: the targets of the unique and primary-key violations.
    query(pg_dsn, f"INSERT INTO {table} (id, n, code, tag) VALUES (-1, 0, 'old', 'taken')")


def committed_letters(bootstrap: str, topic: str, at_least: int) -> list:
    """The topic's committed dead letters, once at least ``at_least`` show.

    A transaction's commit returns before the broker has marked its records committed, so a
    read_committed read right after it can stop short of them; it never shows a record out of
    order, so once the last letters show, every earlier one does too."""

    def read() -> list | None:
        letters = read_topic(bootstrap, topic)
        return letters if len(letters) >= at_least else None

    return wait_until(read, 120, f"{at_least} dead letters in {topic}")


def letters_by_id(bootstrap: str, topic: str, at_least: int) -> dict[int, list]:
    out: dict[int, list] = {}
    for msg in committed_letters(bootstrap, topic, at_least):
        out.setdefault(json.loads(msg.value())["id"], []).append(msg)
    return out


def test_bad_rows_go_to_the_dead_letter_topic_once_and_every_good_row_lands_once(
    spark, pg_dsn: str, bootstrap_servers: str, topic_factory, table_name
) -> None:
    table = table_name("checked")
    dead = topic_factory("dead")
    make_table(pg_dsn, table)
    sink = PostgresSink(
        table, dsn=pg_dsn, sink_id=table, create_table=False, on_bad_row="dead_letter",
        dead_letter_topic=dead, bootstrap_servers=bootstrap_servers,
    )  # fmt: skip
    batch = spark.createDataFrame(
        rows_for(range(100)), "id bigint, n string, code string, tag string"
    )
    batch = batch.repartition(3)

    result = sink(batch, 0)
    assert (result.rows_written, result.dead_letters, result.skipped) == (92, 8, False)
    landed = query(pg_dsn, f"SELECT id, n, code, tag FROM {table} WHERE id >= 0 ORDER BY id")
    assert landed == [(i, i, "abc", f"t{i}") for i in range(100) if i not in BAD]
    letters = letters_by_id(bootstrap_servers, dead, len(BAD))
    assert sorted(letters) == sorted(-1 if i == 60 else i for i in BAD)
    for i, (values, reason) in BAD.items():
        [letter] = letters[-1 if i == 60 else i]
        headers = dict(letter.headers())
        assert reason in headers["fluvial.sink.error"].decode(), (i, headers)
        assert headers["fluvial.spark.sink"] == table.encode()
        assert headers["fluvial.spark.batch"] == b"0"
        row = json.loads(letter.value())
        assert [row["n"], row["code"], row["tag"]] == [
            v.replace("\x00", "\\u0000") if v else v for v in values
        ]
        assert letter.key() is None  # append mode: rows have no key
    assert query(pg_dsn, "SELECT batch_id, rows, dead_letters FROM fluvial_spark_batches "
                         "WHERE sink_id = %s", [table]) == [(0, 92, 8)]  # fmt: skip
    assert query(pg_dsn, "SELECT count(*) FROM fluvial_spark_dead_letters WHERE sink_id = %s",
                 [table]) == [(0,)]  # fmt: skip

    # Spark replays batch 0 after a driver restart: no row and no dead letter twice.
    assert sink(batch, 0).skipped
    following = spark.createDataFrame([(100, "x", "abc", "t100"), (101, "1", "abc", "t101")],
                                      "id bigint, n string, code string, tag string")  # fmt: skip
    assert sink(following, 1).dead_letters == 1
    # Batch 1's letter shows after anything the replay of batch 0 could have sent: nothing.
    letters = letters_by_id(bootstrap_servers, dead, 9)
    assert sum(len(v) for v in letters.values()) == 9
    assert dict(letters[100][0].headers())["fluvial.spark.batch"] == b"1"
    assert query(pg_dsn, f"SELECT count(*) FROM {table} WHERE id >= 0") == [(93,)]


def test_upsert_dead_letters_carry_the_key_and_a_bad_row_keeps_the_old_value(
    spark, pg_dsn: str, bootstrap_servers: str, topic_factory, table_name
) -> None:
    table = table_name("totals")
    dead = topic_factory("dead")
    query(pg_dsn, f"CREATE TABLE {table} (category text PRIMARY KEY, total integer "
                  "CHECK (total >= 0), ok boolean, ratio real)")  # fmt: skip
    sink = PostgresSink(
        table, dsn=pg_dsn, sink_id=table, mode="upsert", key_columns=["category"],
        create_table=False, on_bad_row="dead_letter", dead_letter_topic=dead,
        bootstrap_servers=bootstrap_servers,
    )  # fmt: skip
    schema = "category string, total bigint, ok boolean, ratio double"
    sink(spark.createDataFrame([("a", 1, True, 0.5), ("b", 2, False, 1.0)], schema), 0)
    # 'a' breaks the CHECK; 'c' overflows both the integer and the real column.
    second = [("a", -5, True, float("nan")), ("b", 3, True, 2.0), ("c", 2**40, False, 1e300)]
    assert sink(spark.createDataFrame(second, schema), 1).dead_letters == 2
    # A refused row leaves its key as it was: 'a' keeps 1, 'c' stays absent.
    assert query(pg_dsn, f"SELECT category, total FROM {table} ORDER BY 1") == [("a", 1), ("b", 3)]
    letters = {json.loads(m.key())["category"]: m
               for m in committed_letters(bootstrap_servers, dead, 2)}  # fmt: skip
    assert sorted(letters) == ["a", "c"]
    # Numbers and booleans as JSON; a NaN, which JSON lacks, as the text PostgreSQL was given.
    assert json.loads(letters["a"].value()) == {"category": "a", "total": -5, "ok": True,
                                                "ratio": "nan"}  # fmt: skip
    assert json.loads(letters["c"].value())["total"] == 2**40
    assert b"check constraint" in dict(letters["a"].headers())["fluvial.sink.error"]
    assert b"column 'total': value" in dict(letters["c"].headers())["fluvial.sink.error"]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_with_fail_a_bad_row_stops_the_query_and_nothing_of_its_batch_commits(
    spark, pg_dsn: str, bootstrap_servers: str, topic_factory, table_name, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException
    from pyspark.sql import functions as F

    topic = topic_factory("input", partitions=2)
    table = table_name("strict")
    make_table(pg_dsn, table)
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for i in range(60):
        n = {7: "twelve", 20: "-1"}.get(i, str(i))
        producer.produce(topic, value=json.dumps({"id": i, "n": n, "code": "abc", "tag": f"t{i}"}))
    assert producer.flush(30) == 0
    sink = PostgresSink(table, dsn=pg_dsn, sink_id=table, create_table=False)

    def run_query() -> str:
        value = F.col("value").cast("string")
        rows = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap_servers)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .select(*(F.get_json_object(value, f"$.{c}").alias(c) for c in ("id", "n", "code", "tag")))
            .withColumn("id", F.col("id").cast("bigint"))
        )  # fmt: skip
        running = (
            rows.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            with pytest.raises(StreamingQueryException) as failure:
                running.awaitTermination()  # it ends on its own: at the bad row, or caught up
        finally:
            if running.isActive:
                running.stop()
        return str(failure.value)

    message = run_query()
    assert f"sink {table!r}: a row of batch 0 cannot be written to {table!r}" in message
    assert ("column 'n': invalid input syntax for type integer" in message
            or "violates check constraint" in message), message  # fmt: skip
    assert '"n": "twelve"' in message or '"n": "-1"' in message
    assert "1 more bad row(s) in this batch" in message
    assert "on_bad_row='dead_letter'" in message
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(1,)]  # only the row from before
    assert query(pg_dsn, "SELECT count(*) FROM fluvial_spark_batches WHERE sink_id = %s",
                 [table]) == [(0,)]  # fmt: skip
    # A restarted query stops at the same batch again: a bad row is never skipped.
    message = run_query()
    assert "a row of batch 0 cannot be written" in message
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(1,)]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"on_bad_row": "skip"}, "on_bad_row='skip' is unknown"),
        ({"on_bad_row": "dead_letter"}, "needs dead_letter_topic"),
        ({"on_bad_row": "dead_letter", "dead_letter_topic": "d"}, "needs bootstrap_servers"),
        ({"dead_letter_topic": "d"}, "on_bad_row='fail' stops at bad rows"),
        ({"bootstrap_servers": "127.0.0.1:9092"}, "sends nothing to Kafka"),
    ],
)
def test_bad_row_options_are_checked_before_the_query_starts(kwargs, message) -> None:
    with pytest.raises(ConfigError, match=message):
        PostgresSink("t", dsn="postgresql://127.0.0.1/db", sink_id="s", **kwargs)


def test_a_missing_dead_letter_topic_is_refused_before_the_query_starts(
    bootstrap_servers: str, unique_name
) -> None:
    missing = unique_name("no-such-topic")
    with pytest.raises(ConfigError, match=f"dead-letter topic '{missing}' does not exist"):
        PostgresSink("t", dsn="postgresql://127.0.0.1/db", sink_id="s", on_bad_row="dead_letter",
                     dead_letter_topic=missing, bootstrap_servers=bootstrap_servers)  # fmt: skip


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.timeout(3000)  # five Spark drivers one after another; under load one took 90 s
def test_a_query_killed_around_its_dead_letters_sends_each_once_and_lands_each_good_row_once(
    bootstrap_servers: str, pg_dsn: str, topic_factory, table_name, tmp_path: Path
) -> None:
    topic = topic_factory("events", partitions=2)
    dead = topic_factory("dead")
    table = table_name("stream")
    make_table(pg_dsn, table, extra=', "partition" integer, "offset" bigint')
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    kinds = list(BAD)
    expected_bad: dict[int, str] = {}
    for i in range(1500):
        values = (str(i), "abc", f"t{i}")
        if i % 23 == 5:  # every kind of bad row, over and over, in every batch
            kind = kinds[(i // 23) % len(kinds)]
            if kind != 60:  # a primary-key clash needs the id changed: left to the test above
                values, expected_bad[i] = BAD[kind]
        n, code, tag = values
        value = {"id": i, "n": n, "code": code, "tag": tag}
        producer.produce(topic, key=str(i).encode(), value=json.dumps(value).encode())
    assert producer.flush(30) == 0
    progress = tmp_path / "progress"
    args = [sys.executable, "-m", "tests.sinks.spark_pg_query", "--bootstrap", bootstrap_servers,
            "--input", topic, "--checkpoint", str(tmp_path / "ckpt"), "--dsn", pg_dsn,
            "--table", table, "--sink-id", table, "--max-offsets", "150",
            "--progress", str(progress), "--dead-letter-topic", dead]  # fmt: skip

    def start(*extra: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"query-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115
        return subprocess.Popen([*args, *extra], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ})  # fmt: skip

    def crashed_at(*extra: str) -> None:
        runs.append(start(*extra, "--crash-flag", str(tmp_path / f"crashed-{len(runs)}")))
        assert runs[-1].wait(600) == -signal.SIGKILL, logs()

    def logs() -> str:
        return "\n".join(p.read_text(errors="replace")[-3000:] for p in tmp_path.glob("query-*"))

    runs: list[subprocess.Popen[bytes]] = []
    try:
        # 1. Batch 1 committed in PostgreSQL; the driver dies before sending its letters.
        crashed_at("--crash-before-relay", "1")
        assert query(pg_dsn, "SELECT DISTINCT batch_id FROM fluvial_spark_dead_letters "
                             "WHERE sink_id = %s", [table]) == [(1,)]  # fmt: skip
        # 2. The replay of batch 1 sends them; batch 3's letters die in an open transaction.
        crashed_at("--crash-in-relay", "3")
        # 3. Killed after the sink returned for batch 5, before Spark recorded it: a replay.
        crashed_at("--crash-after-batch", "5")
        # 4. Killed at a random moment.
        runs.append(start())
        wait_until(lambda: progress.read_text().count("done") >= 5, 600, "more batches")
        time.sleep(random.Random(5).uniform(0.0, 1.5))
        with contextlib.suppress(ProcessLookupError):  # unless it already caught up
            os.killpg(runs[-1].pid, signal.SIGKILL)
        runs[-1].wait(60)
        # 5. Runs to the end.
        runs.append(start())
        assert runs[-1].wait(600) == 0, logs()
    finally:
        for run in runs:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
                run.wait(60)

    events = progress.read_text().split("\n")
    assert {"skipped 1", "skipped 3", "skipped 5"} <= set(events), events
    # Every input row is in exactly one place: the table if good, the dead letters if bad.
    landed = [r[0] for r in query(pg_dsn, f"SELECT id FROM {table} WHERE id >= 0")]
    assert len(landed) == len(set(landed)), "a good row landed twice"
    assert sorted(landed) == [i for i in range(1500) if i not in expected_bad]
    letters = letters_by_id(bootstrap_servers, dead, len(expected_bad))
    duplicated = {i: len(v) for i, v in letters.items() if len(v) > 1}
    assert not duplicated, f"dead letters sent twice: {duplicated}"
    assert sorted(letters) == sorted(expected_bad)
    for i, reason in expected_bad.items():
        assert reason in dict(letters[i][0].headers())["fluvial.sink.error"].decode(), i
    # Crash 2 really left letters in an aborted transaction: visible only to read_uncommitted.
    assert len(read_topic(bootstrap_servers, dead, committed_only=False)) > len(expected_bad)
    assert query(pg_dsn, "SELECT count(*) FROM fluvial_spark_dead_letters WHERE sink_id = %s",
                 [table]) == [(0,)]  # fmt: skip
    [(rows, letters_count)] = query(
        pg_dsn,
        "SELECT sum(rows), sum(dead_letters) FROM fluvial_spark_batches WHERE sink_id = %s",
        [table],
    )
    assert (rows, letters_count) == (1500 - len(expected_bad), len(expected_bad))


def test_fail_is_the_default_and_names_the_column_of_a_type_error(
    spark, pg_dsn: str, table_name
) -> None:
    table = table_name("typed")
    make_table(pg_dsn, table)
    sink = PostgresSink(table, dsn=pg_dsn, sink_id=table, create_table=False)
    batch = spark.createDataFrame(
        rows_for(range(10)), "id bigint, n string, code string, tag string"
    )
    with pytest.raises(SinkError, match=r"column 'n': invalid input syntax for type integer: "
                                        r"\"twelve\".*\"id\": 7"):  # fmt: skip
        sink(batch, 0)
    assert query(pg_dsn, f"SELECT count(*) FROM {table}") == [(1,)]
