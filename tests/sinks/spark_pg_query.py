"""A Structured Streaming query from a Kafka topic into PostgreSQL, for the sink's fault tests.

    python -m tests.sinks.spark_pg_query --bootstrap B --input IN --checkpoint DIR --dsn DSN
        --table T --sink-id ID [--max-offsets N] [--progress FILE]
        [--crash-after-batch K --crash-flag FILE]

Each record becomes a row (key, value, partition, offset). ``--crash-after-batch`` kills the
whole process group with SIGKILL once, right after the sink returned for batch K and before
Spark records the batch as committed, so the restarted query replays it. The query runs with
``availableNow``: it ends once it has caught up.
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
        if batch_id == args.crash_after_batch and not args.crash_flag.exists():
            args.crash_flag.touch()
            os.killpg(0, signal.SIGKILL)  # the driver dies before Spark commits the batch

    query = (
        rows.writeStream.foreachBatch(batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
