"""Build a SparkSession with Spark's Kafka connector on its classpath."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from fluvial import children
from fluvial.jvm import java_executable, resolve_jars
from fluvial.spark.class_archive import driver_options

if TYPE_CHECKING:
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
    (:mod:`fluvial.spark.class_archive`). Memory stays modest so that a
    local Kafka and Spark fit side by side on a small machine. Speculation stays off: a
    speculative copy of a side-effecting task would be a zombie writer.
    """
    from pyspark.sql import SparkSession

    java = java_executable()  # fail early, with the fix, if Java 17+ is missing
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("JAVA_HOME", os.path.dirname(os.path.dirname(os.path.realpath(java))))
    if master.startswith("local"):
        # Python workers must import what the driver imports: run them with this interpreter
        # (its virtualenv), not whatever "python3" comes first on the PATH.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    jars = ",".join(str(j) for j in resolve_jars("spark-kafka.xml"))
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars", jars)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.speculation", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # Kafka security options (JAAS lines with passwords) are redacted in the UI, the event
        # log and plan strings, on top of Spark's own secret|password|token patterns.
        .config("spark.redaction.regex", SPARK_REDACTION_REGEX)
        .config("spark.sql.redaction.options.regex", SPARK_SQL_REDACTION_OPTIONS_REGEX)
    )
    conf = dict(extra_conf or {})
    # The driver JVM maps the classes set-up archived for this Java and these jars (about half
    # its start), before the caller's own options so that theirs win.
    archived = driver_options(conf)
    if archived:
        own = conf.get("spark.driver.extraJavaOptions", "")
        conf["spark.driver.extraJavaOptions"] = " ".join([*archived, own]).strip()
    for key, value in conf.items():
        builder = builder.config(key, value)
    # PySpark starts the JVM with a copy of this process's environment, and on a local master
    # the executors' Python workers inherit the JVM's: fluvial's secrets stay out of both (this
    # process read them already; executors get client settings with each lease). Variables
    # from outside fluvial stay, for Spark's own connectors (AWS_SECRET_ACCESS_KEY for s3a).
    with children.secrets_withheld(children.fluvial_secret):
        spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
