"""The test driver is not a second implementation: generated cases run through
``fluvial run --engine local`` on the real local Kafka commit the same output as in the driver.

Each case runs on single-partition topics, with event times near the wall clock (shifted by a
whole number of windows, so window boundaries keep their alignment). Only cases whose every
sub-topology reads one topic are taken: with several, the order in which a running task
interleaves its inputs depends on arrival, while the driver processes records in the order piped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Producer
from tests.event_times import event_time_base_ms
from tests.runtime.harness import committed_offset, read_topic

from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.verify.differential.build import build_topology
from fluvial.verify.differential.generate import generate_case
from fluvial.verify.differential.run import run_fluvial, sink_topics

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(__file__).parent / "differential_app.py"
SEED = 20260515
SAMPLE = 10
DEADLINE_S = 120


def single_input_tasks(case: dict) -> bool:
    topology = build_topology(case)
    subs = topology.subtopologies("sample")
    return topology.global_subtopology("sample") is None and all(
        len(sub.source_topics) == 1 for sub in subs
    )


def sample_cases() -> list[dict]:
    # Window sizes and advances all divide 1 000 000 ms: a base aligned to it keeps windows.
    base = event_time_base_ms(align_ms=1_000_000)
    cases, index = [], 0
    while len(cases) < SAMPLE:
        case = generate_case(SEED, index, settled=True, base_ms=base)
        index += 1
        if single_input_tasks(case) and case["inputs"]:
            cases.append(case)
    return cases


def renamed(case: dict, prefix: str) -> dict:
    """The case with its topics named for this run."""
    case = json.loads(json.dumps(case))
    for node in case["nodes"]:
        if "topic" in node:
            node["topic"] = f"{prefix}-{node['topic']}"
    for record in case["inputs"]:
        record[0] = f"{prefix}-{record[0]}"
    return case


def produce(bootstrap: str, inputs: list[list]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for topic, key, value, timestamp in inputs:
        producer.produce(
            topic,
            key=None if key is None else key.encode(),
            value=None if value is None else value.encode(),
            timestamp=timestamp,
            partition=0,
        )
    assert producer.flush(30) == 0


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset, or -1 while a fresh cluster's coordinator is loading."""
    try:
        return committed_offset(bootstrap, group, topic)
    except KafkaException:
        return -1


def committed_output(bootstrap: str, topic: str) -> list[list]:
    return [
        [None if m.key() is None else m.key().hex(),
         None if m.value() is None else m.value().hex(),
         m.timestamp()[1],
         [[k, v.hex()] for k, v in (m.headers() or [])]]
        for m in read_topic(bootstrap, topic)
    ]  # fmt: skip


@pytest.mark.parametrize("index", range(SAMPLE))
def test_local_engine_commits_what_the_driver_emits(
    index: int,
    bootstrap_servers: str,
    unique_name,  # noqa: ANN001
    app_id_factory,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    base_case = sample_cases()[index]
    prefix = unique_name("case")
    case = renamed(base_case, prefix)
    inputs = sorted({r[0] for r in case["inputs"]} | {n["topic"] for n in case["nodes"]
                                                       if n["op"] in ("stream", "table")})  # fmt: skip
    outputs = sink_topics(case)
    create_topics(bootstrap_servers, [TopicSpec(topic, 1) for topic in inputs + outputs])
    expected = run_fluvial(case)
    assert "error" not in expected, expected.get("error")
    produce(bootstrap_servers, case["inputs"])

    app_id = app_id_factory()
    case_file = tmp_path / "case.json"
    case_file.write_text(json.dumps(case))
    env = {
        **os.environ,
        "FLUVIAL_DIFF_CASE": str(case_file),
        "FLUVIAL_DIFF_APP_ID": app_id,
        "FLUVIAL_DIFF_BOOTSTRAP": bootstrap_servers,
        "FLUVIAL_DIFF_STATE_DIR": str(tmp_path / "state"),
    }
    log = tmp_path / "run.log"
    cmd = [sys.executable, "-m", "fluvial.cli", "run", str(APP), "--engine", "local", "--quiet"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        ends = {t: sum(1 for r in case["inputs"] if r[0] == t) for t in inputs}
        want = {t: len(expected["outputs"][t]) for t in outputs}
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and proc.poll() is None:
            done = all(committed(bootstrap_servers, app_id, t) >= n
                       for t, n in ends.items() if n)  # fmt: skip
            got = {t: committed_output(bootstrap_servers, t) for t in outputs}
            if done and all(len(got[t]) >= want[t] for t in outputs):
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
    for topic in outputs:
        actual = committed_output(bootstrap_servers, topic)
        assert actual == expected["outputs"][topic], (
            f"case {base_case['id']}, topic {topic}: the local engine committed\n{actual}\n"
            f"the driver emitted\n{expected['outputs'][topic]}"
        )
