"""examples/spark_enrich.py runs end to end: views enriched with a table, each written once."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer
from tests import processes
from tests.spark.sink_harness import read_all

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


def test_enrich_example_joins_the_table_and_writes_each_view_once(
    bootstrap_servers, topic_factory, unique_name, tmp_path
) -> None:
    views, regions, out = topic_factory("views", 2), topic_factory("regions"), topic_factory("out")
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True})
    for user, region in [("ann", "north"), ("bob", "south"), ("ann", "east"), ("cy", "west")]:
        producer.produce(regions, key=user.encode(), value=region.encode())
    producer.produce(regions, key=b"cy", value=None)  # cy left: a tombstone
    sent = [(f"{u}", f"/p{i}") for i, u in enumerate(["ann", "bob", "cy", "dee"] * 25)]
    for user, page in sent:
        producer.produce(views, key=user.encode(), value=json.dumps({"page": page}).encode())
    assert producer.flush(30) == 0

    run = processes.run(
        [sys.executable, "examples/spark_enrich.py", "--bootstrap", bootstrap_servers,
         "--checkpoint", str(tmp_path / "ckpt"), "--views", views, "--regions", regions,
         "--output", out, "--sink-id", unique_name("sink"), "--master", "local[2]",
         "--available-now"],
        cwd=REPO, timeout=300, what="examples/spark_enrich.py",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    written = [json.loads(m.value()) for m in read_all(bootstrap_servers, out)]
    region_of = {"ann": "east", "bob": "south", "cy": "unknown", "dee": "unknown"}
    assert Counter((w["user"], w["page"], w["region"]) for w in written) == Counter(
        (user, page, region_of[user]) for user, page in sent
    )
