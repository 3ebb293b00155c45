"""``fluvial run`` application for one generated differential case (see
test_differential_local_engine.py): the case's topology, from the JSON file the test names."""

from __future__ import annotations

import json
import os

from fluvial import StreamsConfig
from fluvial.verify.differential.build import build_topology

_case = json.loads(open(os.environ["FLUVIAL_DIFF_CASE"]).read())  # noqa: SIM115, PTH123
topology = build_topology(_case)
config = StreamsConfig(
    application_id=os.environ["FLUVIAL_DIFF_APP_ID"],
    bootstrap_servers=os.environ["FLUVIAL_DIFF_BOOTSTRAP"],
    processing_guarantee="exactly_once_v2",
    commit_interval_ms=100,
    cache_max_bytes=0,
    state_dir=os.environ["FLUVIAL_DIFF_STATE_DIR"],
    # Compared with Kafka Streams: its stream-time rule across repartition topics.
    catch_up_completeness=False,
)
