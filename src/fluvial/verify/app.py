"""The application the fault matrix runs: an echo, plus per-key sum/count/min/max after a
repartition topic, and the same per bucket of keys behind a second one (when
``FLUVIAL_VERIFY_BUCKETS`` names its output). Configured from the environment by
:mod:`fluvial.verify.matrix`."""

from __future__ import annotations

import os

from fluvial import Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.dsl.grouped import KGroupedStream
from fluvial.dsl.options import Grouped
from fluvial.verify.check import bucket_of


def _aggregate(key: str, value: int, agg: dict[str, int]) -> dict[str, int]:
    if not agg:
        return {"sum": value, "count": 1, "min": value, "max": value}
    return {
        "sum": agg["sum"] + value,
        "count": agg["count"] + 1,
        "min": min(agg["min"], value),
        "max": max(agg["max"], value),
    }


def _aggregate_to(grouped: KGroupedStream, store: str, topic: str) -> None:
    """Sum, count, min and max per key of ``grouped``, every revision written to ``topic``."""
    materialized = (
        Materialized.as_(store).with_key_serde(serdes.string()).with_value_serde(serdes.json())
    )
    (
        grouped.aggregate(dict, _aggregate, materialized=materialized)
        .to_stream()
        .to(topic, key_serde=serdes.string(), value_serde=serdes.json())
    )


def build(builder: StreamsBuilder) -> None:
    stream = builder.stream(
        os.environ["FLUVIAL_VERIFY_INPUT"], key_serde=serdes.string(), value_serde=serdes.long()
    )
    stream.to(
        os.environ["FLUVIAL_VERIFY_ECHO"], key_serde=serdes.string(), value_serde=serdes.long()
    )
    grouped = Grouped.with_(serdes.string(), serdes.long())
    # A key change (to the same key) forces the aggregation through a repartition topic.
    by_key = stream.select_key(lambda key, _value: key).group_by_key(grouped)
    _aggregate_to(by_key, "verify-aggregates", os.environ["FLUVIAL_VERIFY_AGG"])
    buckets = os.environ.get("FLUVIAL_VERIFY_BUCKETS")
    if buckets:
        # Keys of every input partition meet in each bucket: each partition of this repartition
        # topic has every upstream task as a writer.
        by_bucket = stream.group_by(lambda key, _value: bucket_of(key), grouped)
        _aggregate_to(by_bucket, "verify-buckets", buckets)


config = StreamsConfig(
    application_id=os.environ.get("FLUVIAL_VERIFY_APP_ID", "fluvial-verify"),
    bootstrap_servers=os.environ.get("FLUVIAL_VERIFY_BOOTSTRAP", "127.0.0.1:9092"),
    processing_guarantee=os.environ.get("FLUVIAL_VERIFY_GUARANTEE", "exactly_once_v2"),
    commit_interval_ms=int(os.environ.get("FLUVIAL_VERIFY_COMMIT_MS", "500")),
    state_dir=os.environ.get("FLUVIAL_VERIFY_STATE_DIR", "/tmp/fluvial-verify"),
    # Caching off: one revision per input record, so every revision can be checked.
    cache_max_bytes=0,
    replication_factor=int(os.environ.get("FLUVIAL_VERIFY_RF", "-1")),
)
