"""The paper's Figure 2 pipeline, configured from the environment by the runtime tests."""

import os

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes

WINDOW_MS = 5000
GRACE_MS = 2000


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count()
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
    # Caching off: every accepted record yields one revision, so the test can check each one.
    cache_max_bytes=int(os.environ.get("FLUVIAL_TEST_CACHE_BYTES", "0")),
    default_deserialization_exception_handler=os.environ.get("FLUVIAL_TEST_ON_BAD", "fail"),
    dead_letter_topic=os.environ.get("FLUVIAL_TEST_DLT") or None,
)
