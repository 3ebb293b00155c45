"""Everything Spark in fluvial: the session helper, the engine, the exactly-once Structured
Streaming sinks (to Kafka and to PostgreSQL) and the DataFrame readers of fluvial's tables."""

from fluvial.spark.postgres import PostgresBatchResult, PostgresSink
from fluvial.spark.readers import read_table, read_windowed
from fluvial.spark.session import local_spark_session
from fluvial.spark.sink import BatchMarker, BatchResult, KafkaSink, SinkError

__all__ = [
    "BatchMarker",
    "BatchResult",
    "KafkaSink",
    "PostgresBatchResult",
    "PostgresSink",
    "SinkError",
    "local_spark_session",
    "read_table",
    "read_windowed",
]
