"""Counters and lag: re-key by user (a repartition topic), a user function that fails after the
repartition, then a windowed count (10 s windows, no grace). Configured from the environment by
tests/runtime/test_counters_and_lag.py; bad records are skipped and sent to a dead-letter topic."""

import os

from fluvial import StreamsBuilder, StreamsConfig, TimeWindows, serdes


def checked(view: dict) -> dict:
    if view.get("fail"):
        raise ValueError(f"view {view['n']} is marked to fail")
    return view


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
        )
        .select_key(lambda key, view: view["user"])
        .repartition(key_serde=serdes.string(), value_serde=serdes.json())
        .map_values(checked)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10_000))
        .count()
        .to_stream()
        .map(lambda windowed, count: (f"{windowed.key}@{windowed.window.start_ms}", count))
        .to(os.environ["FLUVIAL_TEST_OUTPUT"], key_serde=serdes.string(), value_serde=serdes.long())
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=200,
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
    default_deserialization_exception_handler="log_and_continue",
    processing_exception_handler="log_and_continue",
    dead_letter_topic=os.environ["FLUVIAL_TEST_DEAD"],
)
