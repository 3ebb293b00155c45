"""The application ``fluvial bench queries`` runs: Figure 2 with a named, queryable store."""

import os

from fluvial import KeyValue, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes

env = os.environ
STORE = "pageview-counts"


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(
            env["FLUVIAL_BENCH_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )  # fmt: skip
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .repartition(num_partitions=int(env.get("FLUVIAL_BENCH_PARTITIONS", "4")))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=5000, grace_ms=2000))
        .count(materialized=Materialized.as_(STORE).with_retention(24 * 3_600_000))
        .to_stream()
        .to(
            env["FLUVIAL_BENCH_OUTPUT"],
            key_serde=serdes.time_windowed(serdes.string(), 5000),
            value_serde=serdes.long(),
        )  # fmt: skip
    )


config = StreamsConfig(
    application_id=env["FLUVIAL_BENCH_APP_ID"],
    bootstrap_servers=env["FLUVIAL_BENCH_BOOTSTRAP"],
    processing_guarantee=env.get("FLUVIAL_BENCH_GUARANTEE", "exactly_once_v2"),
    commit_interval_ms=int(env.get("FLUVIAL_BENCH_COMMIT_MS", "100")),
    state_dir=env["FLUVIAL_BENCH_STATE_DIR"],
)
