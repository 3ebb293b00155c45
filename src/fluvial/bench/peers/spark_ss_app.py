"""Spark Structured Streaming's own Kafka source and sink running a ``fluvial bench`` workload.

With ``"sink": "fluvial"`` in its settings the query writes through fluvial's exactly-once
``KafkaSink`` instead (the ``spark-ss-eos`` system), so the two sinks compare on one query.

argv[1] holds the run's settings as JSON. Run by the project's interpreter (it needs pyspark and
the Kafka connector, which :func:`fluvial.spark.local_spark_session` puts on the classpath), but
the query is plain Spark: fluvial only builds the session.

Spark keeps its offsets in its checkpoint, not in a consumer group, so this program reports its
progress itself: one JSON line per finished micro-batch in ``progress_file``, with the epoch time
the batch started and the input offsets it has consumed to.
"""

import json
import sys
import time

from fluvial.spark import local_spark_session


def main() -> None:
    s = json.loads(sys.argv[1])
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    spark = local_spark_session(
        s.get("master", "local[2]"),
        app_name="bench-spark-ss",
        shuffle_partitions=s["partitions"],
    )
    schema = StructType(
        [
            StructField("category", StringType()),
            StructField("period", LongType()),
            StructField("sent", LongType()),
        ]
    )

    def read(topic: str):  # noqa: ANN202
        return (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", s["bootstrap"])
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
        )

    raw = read(s["input"])
    views = raw.select(
        F.col("key").cast("string").alias("key"),
        F.col("timestamp"),
        F.from_json(F.col("value").cast("string"), schema).alias("v"),
    )
    workload = s["workload"]
    mode = "append"
    if workload == "figure2":
        # A windowed count with a watermark, emitting each window's new count (update mode).
        counts = (
            views.where("v.period >= 30000")
            .withWatermark("timestamp", "2 seconds")
            .groupBy(F.window("timestamp", "5 seconds"), F.col("v.category").alias("category"))
            .count()
        )
        out = counts.select(
            F.col("category").alias("key"),
            F.to_json(F.struct(F.col("window.start").alias("start"), "count")).alias("value"),
        )
        mode = "update"
    elif workload == "windowed":
        counts = (
            views.withWatermark("timestamp", "2 seconds")
            .groupBy(F.window("timestamp", "10 seconds"), "key")
            .count()
        )
        out = counts.select(
            "key", F.to_json(F.struct(F.col("window.start").alias("start"), "count")).alias("value")
        )
        mode = "update"
    elif workload == "passthrough":
        out = views.where("v.period >= 30000").select(
            "key",
            F.to_json(
                F.struct("v.category", "v.period", "v.sent", F.lit(True).alias("long"))
            ).alias("value"),
        )
    else:
        raise SystemExit(f"Spark Structured Streaming peer has no {workload} pipeline")

    if s.get("sink") == "fluvial":
        # The same query, written through fluvial's exactly-once sink.
        from fluvial.spark import KafkaSink

        sink = KafkaSink(s["output"], bootstrap_servers=s["bootstrap"],
                         sink_id=f"bench-{s['output']}")  # fmt: skip
        writer = out.writeStream.foreachBatch(sink)
    else:
        writer = (
            out.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", s["bootstrap"])
            .option("topic", s["output"])
        )
    query = (
        writer.option("checkpointLocation", s["state_dir"] + "/checkpoint")
        .outputMode(mode)
        .trigger(processingTime=f"{s['commit_ms']} milliseconds")
        .start()
    )
    reported = -1
    with open(s["progress_file"], "a") as progress:
        while query.isActive:
            for progress_item in query.recentProgress:
                # pyspark 4 gives progress objects; their JSON is the stable form.
                update = (
                    json.loads(progress_item.json)
                    if hasattr(progress_item, "json")
                    else progress_item
                )
                if update["batchId"] <= reported:
                    continue
                reported = update["batchId"]
                consumed = 0
                for source in update["sources"]:
                    ends = source.get("endOffset") or {}
                    if isinstance(ends, str):
                        ends = json.loads(ends)
                    consumed += sum(int(o) for parts in ends.values() for o in parts.values())
                started = update["timestamp"]  # ISO time the trigger fired
                progress.write(
                    json.dumps({"batch": reported, "started": started, "consumed": consumed,
                                "at": time.time()}) + "\n"
                )  # fmt: skip
                progress.flush()
            time.sleep(0.05)


if __name__ == "__main__":
    main()
