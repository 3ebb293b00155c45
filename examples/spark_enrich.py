"""Structured Streaming with fluvial: enrich page views with a fluvial table, write exactly-once.

    uv run python examples/spark_enrich.py --bootstrap 127.0.0.1:9092 --checkpoint /tmp/enrich

- ``pageview-events`` (keyed by user, JSON values such as ``{"page": "/home"}``) is read as a
  stream with Spark's Kafka source.
- ``user-regions`` is a table topic (user -> region), for example the output or changelog of a
  fluvial ``KTable``. ``read_table`` reads its latest committed value per key each micro-batch,
  so the enrichment follows the table as it changes.
- The enriched views go to ``pageviews-enriched`` through fluvial's ``KafkaSink``: each record
  exactly once, even when the driver is killed and the query restarts from its checkpoint.
"""

from __future__ import annotations

import argparse

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fluvial.spark import KafkaSink, local_spark_session, read_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    parser.add_argument("--views", default="pageview-events")
    parser.add_argument("--regions", default="user-regions")
    parser.add_argument("--output", default="pageviews-enriched")
    parser.add_argument("--sink-id", default="pageviews-enriched", help="stable per checkpoint")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--available-now", action="store_true", help="stop once caught up")
    args = parser.parse_args()

    spark = local_spark_session(args.master, app_name="enrich-pageviews")
    views = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.views)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .load()
        .select(
            F.col("key").cast("string").alias("user"),
            F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"),
        )
    )
    sink = KafkaSink(args.output, bootstrap_servers=args.bootstrap, sink_id=args.sink_id)

    def enrich_and_write(batch: DataFrame, batch_id: int) -> None:
        regions = read_table(spark, args.regions, bootstrap_servers=args.bootstrap)
        enriched = batch.join(
            F.broadcast(
                regions.withColumnRenamed("key", "user").withColumnRenamed("value", "region")
            ),
            "user",
            "left",
        )
        sink(
            enriched.select(
                F.col("user").alias("key"),
                F.to_json(
                    F.struct("user", "page", F.coalesce("region", F.lit("unknown")).alias("region"))
                ).alias("value"),
            ),
            batch_id,
        )

    writer = views.writeStream.foreachBatch(enrich_and_write).option(
        "checkpointLocation", args.checkpoint
    )
    query = (writer.trigger(availableNow=True) if args.available_now else writer).start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
