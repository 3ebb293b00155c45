"""fluvial's tables as Spark DataFrames: table and changelog topics, and windowed results.

Both readers take a snapshot of the topic as it is now (earliest to latest offsets), read it
read_committed so that aborted transactions never show, and reduce it to the latest value per
key the way a KTable does: within a partition the later offset wins, whatever its timestamp;
a ``None`` value (a tombstone) removes the key.

Bytes are decoded with fluvial's (and Kafka Streams') wire formats: ``"string"`` (UTF-8),
``"long"``/``"int"`` (big-endian, signed), ``"double"``/``"float"`` (IEEE 754 big-endian),
``"json"`` (text, or parsed into ``schema`` when one is given) and ``"bytes"`` (as is). Long
and int keys decode inside Spark SQL; doubles go through a small Python UDF.

Times are Spark ``timestamp`` columns (window bounds, record timestamps), so they compare,
format and window like any other time in Spark. ``epoch_millis=True`` gives them as ``long``
epoch milliseconds instead, as they are on the wire.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from fluvial.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import StructType

_MAX_LONG = (1 << 63) - 1
# The latest time a Spark timestamp (microseconds in a long) holds, in milliseconds.
_MAX_TIMESTAMP_MS = _MAX_LONG // 1000
SERDES = ("string", "bytes", "long", "int", "double", "float", "json")


def read_table(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap_servers: str,
    key_serde: str = "string",
    value_serde: str = "string",
    value_schema: str | StructType | None = None,
    with_metadata: bool = False,
    kafka_options: dict[str, str] | None = None,
    client_config: dict[str, str] | None = None,
    epoch_millis: bool = False,
) -> DataFrame:
    """The latest value per key of a table or changelog topic, tombstones applied.

    Columns: ``key``, ``value``; with ``with_metadata`` also ``timestamp`` (a Spark
    timestamp; ``long`` epoch milliseconds with ``epoch_millis=True``), ``partition`` and
    ``offset`` of the record that set the value. ``value_schema`` (a DDL string or a Spark
    type) parses ``"json"`` values into columns. A timestamped store's changelog reads the
    same way: Kafka Streams and fluvial keep its timestamp in the record timestamp.
    ``kafka_options`` go to Spark's Kafka source as ``kafka.<name>``. ``client_config`` takes
    fluvial's (librdkafka) client settings, ``StreamsConfig.client_config``, and passes their
    Java equivalents (SASL JAAS line, PEM truststore).
    """
    _check_serde("key_serde", key_serde)
    _check_serde("value_serde", value_serde)
    raw = _snapshot(spark, topic, bootstrap_servers, _options(kafka_options, client_config))
    latest = _latest(raw, ["key"])
    return latest.select(
        _decode(latest["key"], key_serde, None).alias("key"),
        _decode(latest["value"], value_serde, value_schema).alias("value"),
        *_metadata(latest, with_metadata, epoch_millis),
    )


def read_windowed(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap_servers: str,
    window_size_ms: int | None = None,
    session: bool = False,
    store_changelog: bool = False,
    key_serde: str = "string",
    value_serde: str = "long",
    value_schema: str | StructType | None = None,
    latest: bool = True,
    with_metadata: bool = False,
    kafka_options: dict[str, str] | None = None,
    client_config: dict[str, str] | None = None,
    epoch_millis: bool = False,
) -> DataFrame:
    """A windowed-result topic as ``key``, ``window_start``, ``window_end``, ``value``.

    Key layouts (all Kafka Streams'):

    - time windows (tumbling, hopping, sliding): key bytes + 8-byte window start. The end is
      not on the wire, so ``window_size_ms`` is required; it is start + size;
    - ``session=True``: key bytes + 8-byte end + 8-byte start;
    - ``store_changelog=True``: the changelog of a window store, key bytes + 8-byte start +
      4-byte sequence number (``window_size_ms`` required).

    Window bounds are Spark ``timestamp`` columns; with ``epoch_millis=True`` they are
    ``long`` epoch milliseconds, as on the wire (and ``timestamp`` too). With ``latest`` (the default) each window
    shows its final revision and tombstoned windows are gone; ``latest=False`` gives every
    committed revision in offset order per partition, with its metadata. ``kafka_options`` and
    ``client_config`` are as for :func:`read_table`.
    """
    _check_serde("key_serde", key_serde)
    _check_serde("value_serde", value_serde)
    if session and store_changelog:
        raise ConfigError("read_windowed: session=True and store_changelog=True exclude each other")
    if not session and (window_size_ms is None or window_size_ms <= 0):
        raise ConfigError(
            "read_windowed needs window_size_ms (> 0) for time windows: their keys carry only "
            "the window start; pass session=True for session windows"
        )
    from pyspark.sql import functions as F

    raw = _snapshot(spark, topic, bootstrap_servers, _options(kafka_options, client_config))
    suffix = 16 if session else 12 if store_changelog else 8
    key = F.col("key")
    first_long = F.expr(f"substring(`key`, length(`key`) - {suffix - 1}, 8)")
    last_long = F.expr("substring(`key`, length(`key`) - 7, 8)")
    if session:
        start, end = _be_signed(last_long, 8), _be_signed(first_long, 8)
    else:
        start = _be_signed(first_long, 8)
        end = F.least(start + F.lit(window_size_ms), F.lit(_MAX_LONG))
    too_short = F.raise_error(
        F.lit(f"a key in topic {topic!r} is shorter than its {suffix}-byte window suffix")
    )
    windows = raw.select(
        "*",
        F.expr(f"substring(`key`, 1, length(`key`) - {suffix})").alias("inner_key"),
        F.when(F.length(key) < suffix, too_short).otherwise(start).alias("window_start"),
        end.alias("window_end"),
    )
    rows = _latest(windows, ["key"]) if latest else windows
    bounds = [rows["window_start"], rows["window_end"]]
    if not epoch_millis:
        # A session still open has no end yet (Long.MAX_VALUE): the latest timestamp there is.
        bounds = [F.timestamp_millis(F.least(b, F.lit(_MAX_TIMESTAMP_MS))) for b in bounds]
    result = rows.select(
        _decode(rows["inner_key"], key_serde, None).alias("key"),
        bounds[0].alias("window_start"),
        bounds[1].alias("window_end"),
        _decode(rows["value"], value_serde, value_schema).alias("value"),
        *_metadata(rows, with_metadata or not latest, epoch_millis),
    )
    return result if latest else result.orderBy("partition", "offset")


# -- reading and reducing --------------------------------------------------------------------


def _options(
    kafka_options: dict[str, str] | None, client_config: dict[str, str] | None
) -> dict[str, str]:
    """Kafka source options (without the ``kafka.`` prefix): security settings, then overrides."""
    from fluvial.kafka.security import java_client_options

    overrides = kafka_options or {}
    derived = java_client_options(client_config or {}, prefix="", overrides=overrides)
    return {**derived, **overrides}


def _snapshot(
    spark: SparkSession, topic: str, bootstrap_servers: str, kafka_options: dict[str, str] | None
) -> DataFrame:
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("kafka.isolation.level", "read_committed")
    )
    for name, value in (kafka_options or {}).items():
        reader = reader.option(f"kafka.{name}", value)
    return reader.load().select("key", "value", "timestamp", "partition", "offset")


def _latest(frame: DataFrame, identity: list[str]) -> DataFrame:
    """The last record per identity: by offset within a partition, then by timestamp across
    partitions (a key written by two partitioners lives in two partitions); no tombstones."""
    from pyspark.sql import functions as F

    fields = [c for c in frame.columns if c not in identity]
    per_partition = frame.groupBy("partition", *identity).agg(
        F.max_by(F.struct(*fields), F.col("offset")).alias("last")
    )
    overall = per_partition.groupBy(*identity).agg(
        F.max_by(F.col("last"), F.struct(F.col("last.timestamp"), F.col("last.partition"))).alias(
            "last"
        )
    )
    flat = overall.select(*identity, *[F.col(f"last.{c}").alias(c) for c in fields])
    return flat.where(F.col("value").isNotNull())


def _metadata(frame: DataFrame, wanted: bool, epoch_millis: bool) -> list[Column]:
    from pyspark.sql import functions as F

    if not wanted:
        return []
    timestamp = frame["timestamp"]
    if epoch_millis:
        timestamp = F.unix_millis(timestamp).alias("timestamp")
    return [timestamp, frame["partition"], frame["offset"]]


# -- decoding ----------------------------------------------------------------------------------


def _check_serde(what: str, serde: str) -> None:
    if serde not in SERDES:
        raise ConfigError(f"{what}={serde!r} is unknown: use one of {', '.join(SERDES)}")


def _be_signed(column: Column, width: int) -> Column:
    """Big-endian two's-complement bytes of ``width`` as a Spark long, in SQL (no UDF)."""
    from pyspark.sql import functions as F

    unsigned = F.conv(F.hex(column), 16, 10).cast("decimal(20,0)")
    half, full = 1 << (8 * width - 1), 1 << (8 * width)
    # 2**63 and 2**64 do not fit a long literal; pass them as decimals.
    half_, full_ = (F.lit(str(n)).cast("decimal(20,0)") for n in (half, full))
    signed = F.when(unsigned >= half_, unsigned - full_).otherwise(unsigned)
    wrong = F.raise_error(F.lit(f"expected {width}-byte big-endian numbers; use another serde"))
    return (
        F.when(column.isNull(), F.lit(None))
        .when(F.length(column) != width, wrong)
        .otherwise(signed.cast("bigint" if width == 8 else "int"))
    )


def _decode(column: Column, serde: str, schema: str | StructType | None) -> Column:
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, FloatType

    if serde == "bytes":
        return column
    if serde == "string":
        return column.cast("string")
    if serde == "long":
        return _be_signed(column, 8)
    if serde == "int":
        return _be_signed(column, 4)
    if serde == "json":
        text = column.cast("string")
        return F.from_json(text, schema) if schema is not None else text
    width, code = (8, ">d") if serde == "double" else (4, ">f")

    def unpack(data: Any) -> float | None:
        if data is None:
            return None
        if len(data) != width:
            raise ValueError(f"expected {width}-byte {serde}s, got {len(data)} bytes")
        return struct.unpack(code, bytes(data))[0]

    return F.udf(unpack, DoubleType() if serde == "double" else FloatType())(column)
