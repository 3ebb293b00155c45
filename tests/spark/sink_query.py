"""A Structured Streaming query from one Kafka topic to another, for the sink's fault tests.

    python -m tests.spark.sink_query --bootstrap B --input IN --output OUT --checkpoint DIR
        --sink fluvial|spark --sink-id ID [--max-offsets N] [--progress FILE]
        [--crash-after-batch K --crash-flag FILE]

It upper-cases each value and writes it either through fluvial's ``KafkaSink`` or through
Spark's own Kafka writer, both inside ``foreachBatch`` so that a crash point sits at exactly the
same place for both: after the batch's writes returned, before Spark records the batch as
committed. ``--crash-after-batch`` kills the whole process group (driver, JVM, Python workers)
with SIGKILL at that point, once (the flag file remembers it). The query runs with
``availableNow``: it ends by itself once it has caught up.
"""

from __future__ import annotations

import argparse
import os
import signal
from pathlib import Path

from pyspark.sql import functions as F

from fluvial.spark import KafkaSink, local_spark_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--input", "--output", "--checkpoint", "--sink", "--sink-id"):
        parser.add_argument(name, required=True)
    parser.add_argument("--max-offsets", type=int, default=200)
    parser.add_argument("--progress", type=Path)
    parser.add_argument("--crash-after-batch", type=int)
    parser.add_argument("--crash-flag", type=Path)
    args = parser.parse_args()

    spark = local_spark_session(
        "local[2]", app_name="sink-query", driver_memory="768m", shuffle_partitions=2
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
    enriched = source.select("key", F.upper(F.col("value").cast("string")).alias("value"))

    if args.sink == "fluvial":
        write = KafkaSink(args.output, bootstrap_servers=args.bootstrap, sink_id=args.sink_id)
    else:

        def write(df, batch_id):  # noqa: ANN001, ANN202 - Spark's own (at-least-once) writer
            df.write.format("kafka").option("kafka.bootstrap.servers", args.bootstrap).option(
                "topic", args.output
            ).save()

    def note(event: str, batch_id: int) -> None:
        if args.progress is not None:
            with args.progress.open("a") as log:
                log.write(f"{event} {batch_id}\n")

    def batch(df, batch_id):  # noqa: ANN001, ANN202
        note("start", batch_id)
        write(df, batch_id)
        note("done", batch_id)
        if batch_id == args.crash_after_batch and not args.crash_flag.exists():
            args.crash_flag.touch()
            os.killpg(0, signal.SIGKILL)  # the driver dies before Spark commits the batch

    query = (
        enriched.writeStream.foreachBatch(batch)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
