"""Page views counted into every kind of queryable store: windowed, key-value (on disk and in
memory) and session counts per category, over three partitions."""

import os

from fluvial import (
    KeyValue,
    Materialized,
    SessionWindows,
    StreamsBuilder,
    StreamsConfig,
    TimeWindows,
    serdes,
)

WINDOW_MS = 5000
SESSION_GAP_MS = 300


def build(builder: StreamsBuilder) -> None:
    long_views = (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view["period"]))
        .repartition(num_partitions=3, key_serde=serdes.string(), value_serde=serdes.long())
    )
    grouped = long_views.group_by_key()
    (
        grouped.windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=2000)).count(
            materialized=Materialized.as_("windowed").with_retention(3_600_000)
        )
    )
    grouped.count(materialized=Materialized.as_("totals"))
    grouped.count(materialized=Materialized.as_("totals-in-memory").with_store_type("in_memory"))
    (
        grouped.windowed_by(
            SessionWindows.of_inactivity_gap_and_grace(SESSION_GAP_MS, grace_ms=600_000)
        ).count(materialized=Materialized.as_("sessions").with_retention(3_600_000))
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=200,
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
    num_standby_replicas=1,
)
