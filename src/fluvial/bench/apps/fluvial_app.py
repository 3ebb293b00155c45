"""The application ``fluvial bench`` runs with ``fluvial run``: one workload, set by environment.

It is a plain APP.py (not imported as part of the package) so that both engines load it the way
they load any user's application: the Spark engine ships it to its Python workers by path.
"""

import os

from fluvial import StreamsBuilder, StreamsConfig
from fluvial.bench.workloads import build_topology

env = os.environ


def build(builder: StreamsBuilder) -> None:
    build_topology(
        builder,
        env["FLUVIAL_BENCH_WORKLOAD"],
        env["FLUVIAL_BENCH_INPUT"],
        env["FLUVIAL_BENCH_OUTPUT"],
        env.get("FLUVIAL_BENCH_TABLE", ""),
    )


config = StreamsConfig(
    application_id=env["FLUVIAL_BENCH_APP_ID"],
    bootstrap_servers=env["FLUVIAL_BENCH_BOOTSTRAP"],
    processing_guarantee=env["FLUVIAL_BENCH_GUARANTEE"],
    commit_interval_ms=int(env["FLUVIAL_BENCH_COMMIT_MS"]),
    state_dir=env["FLUVIAL_BENCH_STATE_DIR"],
    # Caching off, as in the Kafka Streams peer: every update is a revision on the output.
    cache_max_bytes=int(env.get("FLUVIAL_BENCH_CACHE_BYTES", "0")),
    catch_up_completeness=env.get("FLUVIAL_BENCH_CATCH_UP", "1") == "1",
)
