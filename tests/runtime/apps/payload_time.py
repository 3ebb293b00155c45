"""Event time from a JSON field, a user function that raises on some records, and a dead-letter
topic, under exactly-once: configured from the environment by tests/runtime/test_processing_errors.py.

``FLUVIAL_TEST_MARKS`` is a directory the app and the test talk through: while the file ``hold``
is there, the record ``n == FLUVIAL_TEST_HOLD_AT`` waits (leaving its transaction open), after
writing its process id into ``held``.
"""

import os
import time
from pathlib import Path

from fluvial import Named, StreamsBuilder, StreamsConfig, serdes

MARKS = Path(os.environ["FLUVIAL_TEST_MARKS"])
HOLD_AT = int(os.environ.get("FLUVIAL_TEST_HOLD_AT", "-1"))
# The event time from the config's default extractor instead of the source's own.
BY_DEFAULT = os.environ.get("FLUVIAL_TEST_DEFAULT_EXTRACTOR") == "1"


def event_time(record, partition_time_ms):
    return record.value["ts"]


def check(value):
    n = value["n"]
    if n == HOLD_AT and (MARKS / "hold").exists():
        (MARKS / "held").write_text(str(os.getpid()))  # the process to kill: a Spark worker's
        deadline = time.monotonic() + 120
        while (MARKS / "hold").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if n % 10 == 3:
        raise ValueError(f"no good: {n}")
    return n


def build(builder: StreamsBuilder) -> None:
    (
        builder.stream(
            os.environ["FLUVIAL_TEST_INPUT"],
            key_serde=serdes.string(),
            value_serde=serdes.json(),
            timestamp_extractor=None if BY_DEFAULT else event_time,
            auto_offset_reset=os.environ.get("FLUVIAL_TEST_RESET", "earliest"),
        )
        .map_values(check, Named.as_("check"))
        .to(os.environ["FLUVIAL_TEST_OUTPUT"], key_serde=serdes.string(), value_serde=serdes.long())
    )


config = StreamsConfig(
    application_id=os.environ["FLUVIAL_TEST_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_TEST_BOOTSTRAP"],
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=int(os.environ.get("FLUVIAL_TEST_COMMIT_MS", "500")),
    state_dir=os.environ["FLUVIAL_TEST_STATE_DIR"],
    processing_exception_handler="log_and_continue",
    dead_letter_topic=os.environ["FLUVIAL_TEST_DLT"],
    default_timestamp_extractor=event_time if BY_DEFAULT else None,
)
