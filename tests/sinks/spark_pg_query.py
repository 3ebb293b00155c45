"""A Structured Streaming query from a Kafka topic into PostgreSQL, for the sink's fault tests.

    python -m tests.sinks.spark_pg_query --bootstrap B --input IN --checkpoint DIR --dsn DSN
        --table T --sink-id ID [--max-offsets N] [--progress FILE]
        [--crash-after-batch K --crash-flag FILE]
        [--dead-letter-topic DLT [--crash-before-relay K] [--crash-in-relay K] --crash-flag FILE]

Each record becomes a row (key, value, partition, offset). With ``--dead-letter-topic`` the
values are JSON objects instead, and each becomes a row (id, n, code, tag, partition, offset)
with ``n`` as text, for a table whose types and constraints refuse some of them; the sink sends
those to the dead-letter topic.

Crash points (each kills the whole process group with SIGKILL, once per ``--crash-flag``):

- ``--crash-after-batch K``: right after the sink returned for batch K and before Spark
  records the batch as committed, so the restarted query replays it;
- ``--crash-before-relay K``: after batch K committed in PostgreSQL, before its dead letters
  were sent to Kafka;
- ``--crash-in-relay K``: with batch K's dead letters sent in a Kafka transaction that is not
  yet committed.

The query runs with ``availableNow``: it ends once it has caught up.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

from pyspark.sql import functions as F

from fluvial.spark import PostgresSink, local_spark_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--checkpoint", "--dsn", "--table", "--sink-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=200)
    parser.add_argument("--progress", type=Path)
    parser.add_argument("--crash-after-batch", type=int)
    parser.add_argument("--crash-flag", type=Path)
    parser.add_argument("--dead-letter-topic")
    parser.add_argument("--crash-before-relay", type=int)
    parser.add_argument("--crash-in-relay", type=int)
    args = parser.parse_args()

    spark = local_spark_session(
        "local[2]", app_name="pg-sink-query", driver_memory="768m", shuffle_partitions=2
    )
    source = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    if args.dead_letter_topic:
        value = F.col("value").cast("string")
        rows = source.select(
            F.get_json_object(value, "$.id").cast("bigint").alias("id"),
            F.get_json_object(value, "$.n").alias("n"),
            F.get_json_object(value, "$.code").alias("code"),
            F.get_json_object(value, "$.tag").alias("tag"),
            "partition",
            "offset",
        )
        sink = PostgresSink(
            args.table, dsn=args.dsn, sink_id=args.sink_id, create_table=False,
            on_bad_row="dead_letter", dead_letter_topic=args.dead_letter_topic,
            bootstrap_servers=args.bootstrap,
        )  # fmt: skip
        _arm_relay_crashes(sink, args)
    else:
        rows = source.select(
            F.col("key").cast("string").alias("key"),
            F.upper(F.col("value").cast("string")).alias("value"),
            "partition",
            "offset",
            "timestamp",
        )
        sink = PostgresSink(args.table, dsn=args.dsn, sink_id=args.sink_id)

    def note(event: str, batch_id: int) -> None:
        if args.progress is not None:
            with args.progress.open("a") as log:
                log.write(f"{event} {batch_id}\n")

    def batch(df, batch_id):  # noqa: ANN001, ANN202
        note("start", batch_id)
        result = sink(df, batch_id)
        note("skipped" if result.skipped else "done", batch_id)
        if batch_id == args.crash_after_batch:
            crash(args.crash_flag)  # the driver dies before Spark commits the batch

    query = (
        rows.writeStream.foreachBatch(batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


def crash(flag: Path) -> None:
    """SIGKILL this process group, unless an earlier run already crashed here."""
    if not flag.exists():
        flag.touch()
        os.killpg(0, signal.SIGKILL)


def _arm_relay_crashes(sink: PostgresSink, args: argparse.Namespace) -> None:
    outbox = sink.outbox
    assert outbox is not None
    relay, produce_batch = outbox.relay, outbox._produce_batch

    def crashing_relay(conn):  # noqa: ANN001, ANN202
        if args.crash_before_relay in outbox.pending(conn):
            crash(args.crash_flag)  # batch K is committed in PostgreSQL, its letters not sent
        return relay(conn)

    def crashing_produce_batch(producer, batch_id, letters):  # noqa: ANN001, ANN202
        produce_batch(producer, batch_id, letters)
        if batch_id == args.crash_in_relay:
            crash(args.crash_flag)  # the letters are in an open Kafka transaction

    outbox.relay = crashing_relay  # type: ignore[method-assign]
    outbox._produce_batch = crashing_produce_batch  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
