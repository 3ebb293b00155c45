"""The application ``fluvial bench nexmark`` runs with ``fluvial run``: one Nexmark query, set by
environment (a plain APP.py, so both engines load it as they load any user's application)."""

import os

from fluvial import StreamsBuilder, StreamsConfig
from fluvial.bench.nexmark.model import topics
from fluvial.bench.nexmark.queries import QUERIES

env = os.environ


def build(builder: StreamsBuilder) -> None:
    QUERIES[env["FLUVIAL_BENCH_QUERY"]].build(
        builder, topics(env["FLUVIAL_BENCH_PREFIX"]), env["FLUVIAL_BENCH_OUTPUT"]
    )


config = StreamsConfig(
    application_id=env["FLUVIAL_BENCH_APP_ID"],
    bootstrap_servers=env["FLUVIAL_BENCH_BOOTSTRAP"],
    processing_guarantee=env["FLUVIAL_BENCH_GUARANTEE"],
    commit_interval_ms=int(env["FLUVIAL_BENCH_COMMIT_MS"]),
    state_dir=env["FLUVIAL_BENCH_STATE_DIR"],
    cache_max_bytes=int(env["FLUVIAL_BENCH_CACHE_BYTES"]),
    catch_up_completeness=env.get("FLUVIAL_BENCH_CATCH_UP", "1") == "1",
)
