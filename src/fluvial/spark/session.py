"""Build a SparkSession (or only a SparkContext) with Spark's Kafka connector on its
classpath."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING

from fluvial import children
from fluvial.jvm import java_executable, resolve_jars
from fluvial.spark.class_archive import driver_options

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession


SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|jaas|sasl|ssl[.]key"
SPARK_SQL_REDACTION_OPTIONS_REGEX = r"(?i)url|jaas|password|secret|token|sasl|ssl[.]key"


def local_spark_session(
    master: str = "local[*]",
    *,
    app_name: str = "fluvial",
    driver_memory: str = "1g",
    shuffle_partitions: int = 4,
    extra_conf: dict[str, str] | None = None,
) -> SparkSession:
    """A SparkSession (``local[*]`` by default) that can read and write Kafka.

    The connector jars (``spark-sql-kafka-0-10`` matching pyspark, with its dependencies) are
    resolved from Maven Central once and passed as ``spark.jars``. The driver JVM maps the
    class-data archive set-up made, when there is one for this Java and Spark
    (:mod:`fluvial.spark.class_archive`). Memory stays modest so that a local Kafka and Spark
    fit side by side on a small machine. Speculation stays off: a speculative copy of a
    side-effecting task would be a zombie writer.
    """
    from pyspark.sql import SparkSession

    settings = _settings(master, app_name, driver_memory, shuffle_partitions, extra_conf)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_environment():
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def local_spark_context(
    master: str = "local[*]",
    *,
    app_name: str = "fluvial",
    extra_conf: dict[str, str] | None = None,
) -> SparkContext:
    """A SparkContext with :func:`local_spark_session`'s settings and no SQL session: the
    engine's leases need only the context, and its JVM starts in about 1 s less CPU without
    Spark SQL's set-up. A session made later (``SparkSession.builder.getOrCreate()``) uses it."""
    from pyspark import SparkConf, SparkContext

    settings = _settings(master, app_name, "1g", 4, extra_conf)
    with _jvm_environment():
        sc = SparkContext.getOrCreate(SparkConf().setAll(list(settings.items())))
    sc.setLogLevel("WARN")
    return sc


def _settings(
    master: str,
    app_name: str,
    driver_memory: str,
    shuffle_partitions: int,
    extra_conf: dict[str, str] | None,
) -> dict[str, str]:
    java = java_executable()  # fail early, with the fix, if Java 17+ is missing
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("JAVA_HOME", os.path.dirname(os.path.dirname(os.path.realpath(java))))
    if master.startswith("local"):
        # Python workers must import what the driver imports: run them with this interpreter
        # (its virtualenv), not whatever "python3" comes first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    settings = {
        "spark.master": master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in resolve_jars("spark-kafka.xml")),
        "spark.driver.memory": driver_memory,
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        "spark.speculation": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.ui.enabled": "false",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        # Kafka security options (JAAS lines with passwords) are redacted in the UI, the event
        # log and plan strings, on top of Spark's own secret|password|token patterns.
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
        "spark.sql.redaction.options.regex": SPARK_SQL_REDACTION_OPTIONS_REGEX,
    }
    conf = dict(extra_conf or {})
    # The driver JVM maps the classes set-up archived for this Java and these jars (about half
    # its start), before the caller's own options so that theirs win.
    archived = driver_options(conf)
    if archived:
        own = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = " ".join([*archived, own]).strip()
    return {**settings, **conf}


def _jvm_environment() -> contextlib.AbstractContextManager[None]:
    # PySpark starts the JVM with a copy of this process's environment, and on a local master
    # the executors' Python workers inherit the JVM's: fluvial's secrets stay out of both (this
    # process read them already; executors get client settings with each lease). Variables
    # from outside fluvial stay, for Spark's own connectors (AWS_SECRET_ACCESS_KEY for s3a).
    return children.secrets_withheld(children.fluvial_secret)
