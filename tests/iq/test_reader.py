"""The reader process of the local engine: committed reads from the task stores' files.

It follows window segments as they are created and dropped under it, passes on what only the
application process can answer (``latest``, in-memory stores, worker metrics) behind the same
token, and never outlives the application.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from tests.event_times import event_time_base_ms
from tests.iq.harness import STORE, ServedRunner, alive, ask, counts_of, get
from tests.runtime.harness import PageView, produce, read_revisions, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

MEMORY_STORE = "views-in-memory"
CATEGORIES = [f"cat-{i:02d}" for i in range(6)]


def listening(port: int) -> bool:
    """Whether any socket listens on ``port`` (TCP, IPv4 or IPv6), from /proc."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def test_the_reader_follows_window_segments_as_they_come_and_go(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    # Two minutes of retention: one-minute segments, a new one every chunk below, and each
    # chunk's windows expire (their segment is dropped) three chunks later.
    retention_ms, step_ms = 120_000, 50_000
    rng = random.Random(5)
    base = event_time_base_ms()
    chunks = [
        [
            PageView(f"user-{i}", rng.choice(CATEGORIES), 40_000, base + k * step_ms + i * 100)
            for i in range(200)
        ]
        for k in range(7)
    ]
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state",
                          extra_env={"FLUVIAL_TEST_RETENTION_MS": str(retention_ms)})  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        assert runner.reader_pid() is not None
        produced: list[PageView] = []
        for k, chunk in enumerate(chunks):
            produce(bootstrap_servers, runner.input_topic, chunk)
            produced += chunk
            oracle = counts_of(produced)
            wait_until(lambda o=oracle: dict(read_revisions(bootstrap_servers,
                                                             runner.output_topic)) == o,
                       120, f"chunk {k}'s counts in the output")  # fmt: skip
            # The newest windows live in a segment that did not exist a chunk ago. The store
            # takes in a commit just after Kafka did, and the reader follows a few ms later.
            for category, start in sorted(counts_of(chunk)):
                path = f"/stores/{STORE}/keys/{category}?time={start}&isolation=committed"
                count = oracle[(category, start)]
                wait_until(lambda p=path, c=count: ask(runner.port, p).body.get("value") == c,
                           30, f"chunk {k}'s window {category}@{start}")  # fmt: skip
            # Windows three chunks back are expired, their segment dropped: none is answered.
            for old in chunks[: max(0, k - 2)]:
                for category, start in sorted(counts_of(old)):
                    answer = ask(runner.port, f"/stores/{STORE}/keys/{category}?time={start}")
                    assert answer.status == 200 and answer.body["found"] is False, answer.body
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()


def test_latest_in_memory_stores_token_and_metrics_pass_through_the_reader(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    token = "reader-test-token"
    rng = random.Random(6)
    base = event_time_base_ms()
    views = [PageView(f"user-{i}", rng.choice(CATEGORIES), rng.choice([10_000, 40_000]),
                      base + i * 50) for i in range(1500)]  # fmt: skip
    oracle = counts_of(views)
    per_category = Counter(v.category for v in views if v.period >= 30_000)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state",
                          extra_env={"FLUVIAL_SERVE_TOKEN": token,
                                     "FLUVIAL_TEST_MEMORY_STORE": "1"})  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()  # /health needs no token
        assert runner.reader_pid() is not None
        produce(bootstrap_servers, runner.input_topic, views)
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   120, "the committed output to reach the oracle")  # fmt: skip
        port = runner.port

        refused = get(port, "/stores")
        assert refused.status == 401 and "bearer token" in refused.body["error"]
        stores = get(port, "/stores", token=token).body["stores"]
        assert {s["name"]: s["type"] for s in stores} == {
            STORE: "window", MEMORY_STORE: "timestamped_key_value"}  # fmt: skip

        (category, start), count = sorted(oracle.items())[0]
        for isolation in ("committed", "latest"):
            answer = get(port, f"/stores/{STORE}/keys/{category}?time={start}"
                               f"&isolation={isolation}", token=token)  # fmt: skip
            assert answer.status == 200 and answer.body["value"] == count, answer.body
            assert answer.body["isolation"] == isolation
        # An in-memory store has no committed copy: the same refusal as in-process; its
        # latest state comes from the application process.
        committed = get(port, f"/stores/{MEMORY_STORE}/keys/{category}", token=token)
        assert committed.status == 400 and "in memory" in committed.body["error"]
        for category in CATEGORIES:
            latest = get(port, f"/stores/{MEMORY_STORE}/keys/{category}?isolation=latest",
                         token=token)  # fmt: skip
            assert latest.status == 200, latest.body
            assert latest.body["value"] == per_category[category], latest.body
        scan = get(port, f"/stores/{MEMORY_STORE}/all?isolation=latest", token=token)
        assert {e["key"]: e["value"] for e in scan.body["entries"]} == dict(per_category)
        unknown = get(port, "/stores/nope/keys/x?isolation=latest", token=token)
        assert unknown.status == 404 and STORE in unknown.body["error"]

        assert get(port, "/metrics").status == 401
        metrics = get(port, "/metrics", token=token).body["text"]
        processed = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("fluvial_worker_records_processed_total{")
        )
        assert processed >= len(views), "the workers' metrics come from the application"
        assert 'fluvial_queries_refused_total{reason="unauthorized"} 2.0' in metrics
        assert 'fluvial_queries_refused_total{reason="bad_request"} 1.0' in metrics
        assert 'fluvial_queries_served_total{op="key",store="views-in-memory"} 6.0' in metrics
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()


def test_the_reader_never_outlives_the_application(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state")  # fmt: skip
    shared = tmp_path / "state" / runner.app_id / ".reader"
    runner.start()
    try:
        runner.wait_serving()
        reader = runner.reader_pid()
        assert reader is not None and alive(reader)
        assert runner.stop() == 0, runner.output()
        # A clean stop stops the reader and removes what the two processes shared.
        wait_until(lambda: not alive(reader), 30, "the reader to exit with the application")
        assert not any(shared.iterdir()), list(shared.iterdir())

        runner.start()
        runner.wait_serving()
        reader = runner.reader_pid()
        assert reader is not None
        runner.kill9()
        # The kernel kills the reader with its application, and nothing listens on the
        # address any more (once the last of its threads is gone, which may take a moment).
        wait_until(lambda: not alive(reader), 30, "the reader to die with the application")
        wait_until(lambda: not listening(runner.port), 30, "the address to be released")

        # The next start clears what the killed process left behind, and serves again.
        left = {p.name for p in shared.iterdir()}
        assert left, "a killed application leaves its board behind"
        runner.start()
        runner.wait_serving()
        wait_until(lambda: not left & {p.name for p in shared.iterdir()}, 30,
                   "the stale board to be removed")  # fmt: skip
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()
