"""``fluvial bench postgres-sink``: the PostgreSQL sink against two plain writers, same run.

All three read the same pre-loaded topic (page views as JSON) from the beginning, decode each
record into the same columns (``key, category, period`` and the ``kafka_*`` metadata) and
write it into a table of their own, until every record is in:

- ``insert-loop``: one ``INSERT`` statement per row, a commit every batch; what a hand-written
  consumer loop does;
- ``copy``: ``COPY`` per batch and a commit, with no offsets and no fencing: the physical limit
  of getting these rows into PostgreSQL from this consumer;
- ``fluvial``: :class:`fluvial.sinks.PostgresSink`, rows and offsets in one transaction per
  batch, the epoch checked under a row lock (``mode`` append, or upsert by key).

Each result is records per second over the time from the writer's start to its last commit.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from fluvial.bench.harness import _producer, kafka
from fluvial.bench.workloads import generate_input
from fluvial.kafka import free_port
from fluvial.kafka.admin import TopicSpec, create_topics

SCHEMA = "category string, period long"
WRITERS = ("insert-loop", "copy", "fluvial", "fluvial-upsert")


@contextlib.contextmanager
def postgres(dsn: str | None) -> Iterator[str]:
    """The given database, or a private local PostgreSQL (durable: fsync on) for the run."""
    if dsn:
        yield dsn
        return
    from fluvial.sinks.local import LocalPostgres

    with LocalPostgres(port=free_port()) as cluster:
        yield cluster.dsn


def preload(
    bootstrap: str, topic: str, records: int, partitions: int, settings: dict[str, str]
) -> None:
    create_topics(bootstrap, [TopicSpec(topic, partitions)], admin_config=settings)
    producer = _producer(bootstrap, linger_ms=20, settings=settings)
    base_ms = int(time.time() * 1000) - 10 * records - 60_000
    for record in generate_input("passthrough", records, base_ms=base_ms):
        while True:
            try:
                producer.produce(topic, record.value, record.key, timestamp=record.timestamp_ms)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) != 0:
        raise RuntimeError("pre-loading the input did not finish within 120 s")


def _plain_writer(
    name: str, bootstrap: str, topic: str, partitions: int, dsn: str, table: str,
    records: int, batch: int, settings: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    """``insert-loop`` or ``copy``: a consumer loop with no offsets kept anywhere."""
    import psycopg
    from psycopg import sql

    from fluvial.sinks.columns import RowCodec, millis_to_datetime

    codec = RowCodec(value_serde="json", value_schema=SCHEMA)
    columns = codec.columns
    names = sql.SQL(", ").join(sql.Identifier(c.name) for c in columns)
    with psycopg.connect(dsn, autocommit=True) as conn:
        definitions = sql.SQL(", ").join(
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.pg_type)) for c in columns
        )
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} ({}, PRIMARY KEY (kafka_topic, kafka_partition, kafka_offset))"
            ).format(sql.Identifier(table), definitions)  # fmt: skip
        )
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(table), names, sql.SQL(", ").join(sql.Placeholder() * len(columns))
        )
        copy_sql = sql.SQL("COPY {} ({}) FROM STDIN").format(sql.Identifier(table), names)
        consumer = Consumer({
            **settings, "bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False, "isolation.level": "read_committed",
        })  # fmt: skip
        started = time.monotonic()
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        written = 0
        try:
            while written < records:
                msgs = [m for m in consumer.consume(batch, 1.0) if m.error() is None]
                rows = []
                for m in msgs:
                    meta = (m.topic(), m.partition(), m.offset(),
                            millis_to_datetime(m.timestamp()[1]))  # fmt: skip
                    rows.append((*codec.key_part(str(m.topic()), m.key()),
                                 *codec.value_part(str(m.topic()), m.value()), *meta))  # fmt: skip
                if not rows:
                    continue
                with conn.transaction(), conn.cursor() as cur:
                    if name == "copy":
                        with cur.copy(copy_sql) as copy:
                            for row in rows:
                                copy.write_row(row)
                    else:
                        for row in rows:
                            cur.execute(insert, row)
                written += len(rows)
        finally:
            consumer.close()
        seconds = time.monotonic() - started
        [(count,)] = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
    return {"rows": count, "seconds": seconds}


def _fluvial_writer(
    bootstrap: str, topic: str, dsn: str, table: str, batch: int, mode: str,
    settings: dict[str, str],
) -> dict[str, Any]:  # fmt: skip
    from psycopg import connect, sql

    from fluvial.sinks import PostgresSink

    sink = PostgresSink(
        topic, table=table, dsn=dsn, bootstrap_servers=bootstrap, mode=mode,  # type: ignore[arg-type]
        value_serde="json", value_schema=SCHEMA, max_batch_records=batch, client_config=settings,
    )  # fmt: skip
    started = time.monotonic()
    progress = sink.run(stop_at_end=True)
    seconds = time.monotonic() - started
    with connect(dsn) as conn:
        [(count,)] = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table)))
    return {"rows": count, "seconds": seconds, "records": progress.records_read}


def run_postgres_sink_bench(
    *,
    records: int,
    partitions: int,
    batch: int,
    writers: list[str],
    bootstrap: str | None,
    dsn: str | None,
    client_config: dict[str, str] | None = None,
    say: Any = print,
) -> dict[str, Any]:
    """Run every writer on the same topic and database; returns the results document.

    ``client_config``: the Kafka client settings of ``bootstrap`` (a secured cluster's), for
    every client of the run."""
    for writer in writers:
        if writer not in WRITERS:
            raise ValueError(f"unknown writer {writer!r}: use {', '.join(WRITERS)}")
    token = uuid.uuid4().hex[:8]
    topic = f"bench-pg-{token}"
    results: list[dict[str, Any]] = []
    settings = dict(client_config or {})
    with kafka(bootstrap) as servers, postgres(dsn) as database:
        say(f"bench: Kafka at {servers}; pre-loading {records:,} records")
        preload(servers, topic, records, partitions, settings)
        for writer in writers:
            table = f"bench_{writer.replace('-', '_')}_{token}"
            if writer.startswith("fluvial"):
                mode = "upsert" if writer == "fluvial-upsert" else "append"
                run = _fluvial_writer(servers, topic, database, table, batch, mode, settings)
            else:
                run = _plain_writer(writer, servers, topic, partitions, database, table,
                                    records, batch, settings)  # fmt: skip
            run.update(writer=writer, rows_per_s=records / run["seconds"])
            results.append(run)
            say(f"{writer:<15} {run['rows_per_s']:>10,.0f} records/s  "
                f"{run['seconds']:7.2f} s  rows in table {run['rows']:,}")  # fmt: skip
    by_name = {r["writer"]: r["rows_per_s"] for r in results}
    for r in results:
        if "copy" in by_name:
            r["vs_copy"] = r["rows_per_s"] / by_name["copy"]
        if "insert-loop" in by_name:
            r["vs_insert_loop"] = r["rows_per_s"] / by_name["insert-loop"]
    return {"records": records, "partitions": partitions, "batch": batch, "runs": results}


__all__ = ["WRITERS", "run_postgres_sink_bench"]
