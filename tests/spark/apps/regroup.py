"""Two sub-topologies: re-key page views by category (a repartition topic), then count."""

import os

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, serdes


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .count()
        .to_stream()
        .to(os.environ["FLUVIAL_TEST_OUTPUT"], key_serde=serdes.string(), value_serde=serdes.long())
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee=os.environ.get("FLUVIAL_TEST_GUARANTEE", "exactly_once_v2"),
    commit_interval_ms=int(os.environ.get("FLUVIAL_TEST_COMMIT_MS", "500")),
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
    # 0 turns the record cache off: every record then yields exactly one revision.
    cache_max_bytes=int(os.environ.get("FLUVIAL_TEST_CACHE_BYTES", 10 * 1024 * 1024)),
)
