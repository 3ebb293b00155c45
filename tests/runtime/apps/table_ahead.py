"""Readings that take their event time from the payload, joined with a table written with the
wall clock, re-keyed by site and maxed per minute: configured from the environment by
tests/runtime/test_table_ahead.py.

The table's timestamps run about 20 minutes ahead of the readings'. Read first, it must not
make the readings late after the re-key (catch-up completeness counts only the stream side);
read after a backlog of readings, every reading misses it, and the join says why.
"""

import logging
import os
import sys

from fluvial import StreamsBuilder, StreamsConfig, TimeWindows, serdes

WINDOW_MS, GRACE_MS = 60_000, 30_000
OUT = os.environ.get("FLUVIAL_TEST_OUTPUT", "out")

# The join's warning and every record an operator drops reach the run's log.
_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("%(threadName)s %(name)s: %(message)s"))
for _name in ("fluvial.dsl", "fluvial.processor.completeness", "fluvial.runtime.progress"):
    logging.getLogger(_name).setLevel(logging.DEBUG)
    logging.getLogger(_name).addHandler(_handler)


def event_time(record, partition_time_ms):
    return record.value["ts"]


def build(builder: StreamsBuilder) -> None:
    sensors = builder.table(
        os.environ["FLUVIAL_TEST_TABLE"], key_serde=serdes.string(), value_serde=serdes.json()
    )
    readings = builder.stream(
        os.environ["FLUVIAL_TEST_INPUT"],
        key_serde=serdes.string(),
        value_serde=serdes.json(),
        timestamp_extractor=event_time,
    )
    (readings.join(sensors, lambda reading, sensor: {"site": sensor["site"], "v": reading["v"]})
        .select_key(lambda sensor, joined: joined["site"])
        .map_values(lambda joined: joined["v"])
        .group_by_key(key_serde=serdes.string(), value_serde=serdes.long())
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .reduce(max)
        .to_stream()
        .to(OUT, key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long()))  # fmt: skip


config = StreamsConfig(
    application_id=os.environ.get("FLUVIAL_TEST_APP_ID", "table-ahead"),
    bootstrap_servers=os.environ.get("FLUVIAL_TEST_BOOTSTRAP", "127.0.0.1:9092"),
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=int(os.environ.get("FLUVIAL_TEST_COMMIT_MS", "100")),
    state_dir=os.environ.get("FLUVIAL_TEST_STATE_DIR", "/tmp/fluvial"),
    cache_max_bytes=0,
)
