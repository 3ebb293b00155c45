"""Query parameters over HTTP: bad limits and window-only parameters on key-value stores are
400s, /count says whether it is exact, and JSON keys are written in a path as the docs say."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import httpx
import pytest
from confluent_kafka import Producer

from fluvial import KeyValue, Materialized, StreamsBuilder, StreamsConfig, serdes
from fluvial.iq.server import serve
from fluvial.iq.service import LocalQueryService
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STORE = "by-user-region"
KEYS = [{"user": f"u{i}", "region": ["eu", "us"][i % 2]} for i in range(6)]


def topology(source: str):  # noqa: ANN201 - a Topology
    builder = StreamsBuilder()
    (builder.stream(source, key_serde=serdes.string(), value_serde=serdes.json())
        .map(lambda key, view: KeyValue({"user": key, "region": view["region"]}, 1))
        .group_by_key(key_serde=serdes.json(), value_serde=serdes.long())
        .count(materialized=Materialized.as_(STORE)))  # fmt: skip
    return builder.build()


def test_parameters_are_checked_and_json_keys_are_found(
    bootstrap_servers: str, topic_factory, app_id_factory, tmp_path: Path
) -> None:
    source = topic_factory("views", partitions=2)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap_servers,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    base = event_time_base_ms()
    for i, key in enumerate(KEYS * 2):  # every key counted twice
        producer.produce(source, key=key["user"], value=json.dumps({"region": key["region"]}),
                         timestamp=base + i)  # fmt: skip
    producer.flush(30)
    config = StreamsConfig(application_id=app_id_factory(), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", commit_interval_ms=100,
                           state_dir=str(tmp_path / "state"))  # fmt: skip
    with Application(topology(source), config) as app:
        service = LocalQueryService(lambda: app.queries, application_id=config.application_id,
                                    running=lambda: True)  # fmt: skip
        server, _metrics = serve(service, "127.0.0.1:0")
        try:
            check_parameters(f"http://127.0.0.1:{server.port}/stores/{STORE}/")
        finally:
            server.stop()


def check_parameters(base: str) -> None:
    def get(path: str) -> httpx.Response:
        return httpx.get(base + path, timeout=30)

    deadline = time.monotonic() + 120
    while True:
        answer = get("count?exact=true")
        if answer.status_code == 200 and answer.json()["approximate_num_entries"] == len(KEYS):
            break
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)
    assert answer.json()["approximate"] is False
    estimate = get("count").json()
    assert estimate["approximate"] is True and estimate["approximate_num_entries"] >= 1

    for bad in ("-1", "0", "ten", "2.5"):
        refused = get(f"all?limit={bad}")
        assert refused.status_code == 400, (bad, refused.text)
        assert "limit" in refused.json()["error"]
    one = get("all?limit=1").json()
    assert len(one["entries"]) == 1 and one["truncated"] is True

    # The docs' recipe: the key's JSON text, percent-encoded. Key order and spaces differ
    # from what the application wrote; the same key is found.
    key = {"region": "us", "user": "u1"}
    path = urllib.parse.quote(json.dumps(key), safe="")
    found = get(f"keys/{path}").json()
    assert found["found"] is True and found["value"] == 2 and found["key"] == key
    reordered = urllib.parse.quote('{"user":"u1",   "region":"us"}', safe="")
    assert get(f"keys/{reordered}").json()["value"] == 2

    timed = get(f"keys/{path}?time=0")
    assert timed.status_code == 400
    assert "window stores" in timed.json()["error"]
