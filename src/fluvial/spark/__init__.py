"""Everything Spark in fluvial: the session helper (and, later, the engine, sink and readers)."""

from fluvial.spark.session import local_spark_session

__all__ = ["local_spark_session"]
