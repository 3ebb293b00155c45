"""Clicks counted per user, in the versions a user deploys one after the other.

``FLUVIAL_TEST_VERSION=2`` adds a guard in front of the re-key, which shifts every generated
name behind it; ``FLUVIAL_TEST_NAMED=1`` names the grouping and the count, so nothing shifts.
"""

import os

from fluvial import Grouped, Materialized, StreamsBuilder, StreamsConfig, serdes


def build(builder: StreamsBuilder) -> None:
    named = os.environ.get("FLUVIAL_TEST_NAMED") == "1"
    clicks = builder.stream(
        os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
    )
    if os.environ.get("FLUVIAL_TEST_VERSION") == "2":
        clicks = clicks.filter(lambda key, click: click is not None)
    grouped = clicks.select_key(lambda key, click: click["user"]).group_by_key(
        Grouped.as_("by-user") if named else None,
        key_serde=serdes.string(),
        value_serde=serdes.json(),
    )
    counts = (
        grouped.count(materialized=Materialized.as_("clicks-per-user"))
        if named
        else grouped.count()
    )
    counts.to_stream().to(
        os.environ["FLUVIAL_TEST_OUTPUT"], key_serde=serdes.string(), value_serde=serdes.long()
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=200,
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
)
