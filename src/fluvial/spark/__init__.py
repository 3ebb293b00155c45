"""Everything Spark in fluvial: the session helper, the engine, the exactly-once Structured
Streaming sink and the DataFrame readers of fluvial's tables."""

from fluvial.spark.readers import read_table, read_windowed
from fluvial.spark.session import local_spark_session
from fluvial.spark.sink import BatchMarker, BatchResult, KafkaSink, SinkError

__all__ = [
    "BatchMarker",
    "BatchResult",
    "KafkaSink",
    "SinkError",
    "local_spark_session",
    "read_table",
    "read_windowed",
]
