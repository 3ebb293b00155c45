"""Three operators behind re-keys, configured from the environment by the catch-up tests:
a windowed count, a session count and a stream-stream join (tests/runtime/test_catch_up.py)."""

import logging
import os
import sys
import time

from fluvial import (
    JoinWindows,
    KeyValue,
    SessionWindows,
    StreamsBuilder,
    StreamsConfig,
    TimeWindows,
    serdes,
)

WINDOW_MS, GRACE_MS = 10_000, 2_000
SESSION_GAP_MS = 2_000
JOIN_DIFF_MS = 1_000
OUT = os.environ.get("FLUVIAL_TEST_OUTPUT", "out")

# Every record an operator drops is logged, so a failing test names which ones were dropped.
# So is each upstream task's end of input, as it says it and as each downstream task takes it.
_handler = logging.StreamHandler(sys.stderr)
_handler.setFormatter(logging.Formatter("%(relativeCreated)d %(threadName)s %(name)s: %(message)s"))
for _name in ("fluvial.dsl", "fluvial.processor.completeness", "fluvial.runtime.progress"):
    logging.getLogger(_name).setLevel(logging.DEBUG)
    logging.getLogger(_name).addHandler(_handler)


def build(builder: StreamsBuilder) -> None:
    views = builder.stream(
        os.environ["FLUVIAL_TEST_INPUT"], key_serde=serdes.string(), value_serde=serdes.json()
    )
    # A user function as slow as FLUVIAL_TEST_PAUSE_MS per record: a backlog that lasts long
    # enough to be killed midway. Always there, so that runs with and without the pause have
    # the same topology (another topology would be refused as a changed deployment).
    pause_s = float(os.environ.get("FLUVIAL_TEST_PAUSE_MS", "0")) / 1000
    views = views.peek(lambda k, v: pause_s and time.sleep(pause_s))
    (views.map(lambda k, v: KeyValue(v["category"], v))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count()
        .to_stream()
        .to(f"{OUT}-windows", key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long()))  # fmt: skip
    (views.select_key(lambda k, v: v["session"])
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(SESSION_GAP_MS, GRACE_MS))
        .count()
        .to_stream()
        .to(f"{OUT}-sessions", key_serde=serdes.session_windowed(serdes.string()),
            value_serde=serdes.long()))  # fmt: skip
    by_bucket = views.select_key(lambda k, v: v["bucket"])
    left = by_bucket.filter(lambda k, v: v["category"] in ("news", "sports"))
    right = by_bucket.filter(lambda k, v: v["category"] not in ("news", "sports"))
    (left.join(right, lambda a, b: f"{a['id']}|{b['id']}",
               JoinWindows.of_time_difference_and_grace(JOIN_DIFF_MS, GRACE_MS))
        .to(f"{OUT}-joined", key_serde=serdes.string(), value_serde=serdes.string()))  # fmt: skip


config = StreamsConfig(
    application_id=os.environ.get("FLUVIAL_TEST_APP_ID", "catch-up"),
    bootstrap_servers=os.environ.get("FLUVIAL_TEST_BOOTSTRAP", "127.0.0.1:9092"),
    processing_guarantee=os.environ.get("FLUVIAL_TEST_GUARANTEE", "exactly_once_v2"),
    commit_interval_ms=int(os.environ.get("FLUVIAL_TEST_COMMIT_MS", "100")),
    state_dir=os.environ.get("FLUVIAL_TEST_STATE_DIR", "/tmp/fluvial"),
    cache_max_bytes=0,
    catch_up_completeness=os.environ.get("FLUVIAL_TEST_CATCH_UP", "1") == "1",
)
