"""Figure 2 with its counts in a named store, spread over several partitions for queries.

The repartition topic has ``FLUVIAL_TEST_PARTITIONS`` partitions (4 by default), so the store
has that many tasks and every slot owns some keys.
"""

import os

from fluvial import KeyValue, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes

WINDOW_MS = 5000
GRACE_MS = 2000
STORE = "pageview-counts"
MEMORY_STORE = "views-in-memory"


def build(builder: StreamsBuilder) -> None:
    views = (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .repartition(num_partitions=int(os.environ.get("FLUVIAL_TEST_PARTITIONS", "4")))
    )
    if os.environ.get("FLUVIAL_TEST_MEMORY_STORE"):
        # Long views per category, all time, in an in-memory store (it answers latest only).
        views.group_by_key().count(
            materialized=Materialized.as_(MEMORY_STORE).with_store_type("in_memory")
        )
    # An hour of windows stays queryable by default (the default keeps only size + grace).
    retention_ms = int(os.environ.get("FLUVIAL_TEST_RETENTION_MS", "3600000"))
    (
        views.group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count(materialized=Materialized.as_(STORE).with_retention(retention_ms))
        .to_stream()
        .to(
            os.environ["FLUVIAL_TEST_OUTPUT"],
            key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long(),
        )
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee=os.environ.get("FLUVIAL_TEST_GUARANTEE", "exactly_once_v2"),
    commit_interval_ms=int(os.environ.get("FLUVIAL_TEST_COMMIT_MS", "500")),
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
    # Caching off: every accepted record yields one revision, so every state is a revision.
    cache_max_bytes=int(os.environ.get("FLUVIAL_TEST_CACHE_BYTES", "0")),
    num_standby_replicas=int(os.environ.get("FLUVIAL_TEST_STANDBYS", "0")),
)
