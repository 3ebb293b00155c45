"""Interactive queries over HTTP against ``fluvial run --engine local --serve`` on a real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial.iq.queries import default_partition
from tests.iq.harness import MEMORY_STORE, STORE, ServedRunner, ask, counts_of, get, in_grace_views
from tests.runtime.harness import WINDOW_MS, produce, read_revisions, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def final_values(revisions: list) -> dict:
    return dict(revisions)


@pytest.mark.parametrize(
    ("engine", "reader"),
    [("local", None), ("local", False), pytest.param("spark", None, marks=pytest.mark.spark)],
    ids=["local-reader-process", "local-in-process", "spark"],
)
def test_windowed_counts_over_http_equal_the_oracle_for_every_key(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, engine: str,
    reader: bool | None,
) -> None:  # fmt: skip
    views = in_grace_views(seed=1, count=3000)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state", engine=engine,
                          reader=reader, extra_env={"FLUVIAL_TEST_MEMORY_STORE": "1"})  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        if engine == "local":
            # The local engine answers committed reads from a reader process by default.
            assert (runner.reader_pid() is not None) == (reader is None), runner.output()
        produce(bootstrap_servers, runner.input_topic, views)
        wait_until(
            lambda: final_values(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
            120, "the committed output to reach the oracle",
        )  # fmt: skip
        port = runner.port

        stores = ask(port, "/stores").body["stores"]
        [store] = [s for s in stores if s["name"] == STORE]
        assert store["type"] == "window" and store["window_size_ms"] == WINDOW_MS
        assert store["partitions"] == 4

        # Every window of every key, one point query each: committed state equals the oracle.
        slots = set()
        for (category, start), count in sorted(oracle.items()):
            answer = ask(port, f"/stores/{STORE}/keys/{category}?time={start}")
            assert answer.status == 200, answer.body
            assert answer.body["value"] == count, (category, start, answer.body)
            assert answer.body["isolation"] == "committed"
            # The key's partition is the one Kafka's partitioner gave it (its value proves it).
            assert answer.body["partition"] == default_partition(json.dumps(category).encode(), 4)
            slots.add(answer.body["slot"])
        assert slots == {0, 1}, "keys owned by each of the two slots are answered"

        # Per-key window ranges, and every key's windows at once, agree with the oracle too.
        for category in sorted({c for c, _ in oracle}):
            answer = ask(port, f"/stores/{STORE}/keys/{category}")
            got = {(category, w["start"]): w["value"] for w in answer.body["windows"]}
            assert got == {k: v for k, v in oracle.items() if k[0] == category}
        everything = ask(port, f"/stores/{STORE}/windows?isolation=latest").body["windows"]
        assert {(w["key"], w["start"]): w["value"] for w in everything} == oracle
        assert all(w["end"] - w["start"] == WINDOW_MS for w in everything)

        # A scan's limit holds for the whole answer: on Spark each slot cuts its own tasks'
        # part, and the driver cuts the merged answer again.
        categories = sorted({c for c, _ in oracle})
        latest = "isolation=latest"
        for limit in (1, 2, 5):
            scan = ask(port, f"/stores/{MEMORY_STORE}/all?{latest}&limit={limit}").body
            assert [e["key"] for e in scan["entries"]] == categories[:limit], scan
            assert scan["truncated"] is True
            ranged = ask(port, f"/stores/{MEMORY_STORE}/range?from={categories[1]}"
                               f"&to={categories[-1]}&{latest}&limit={limit}").body  # fmt: skip
            assert [e["key"] for e in ranged["entries"]] == categories[1 : 1 + limit], ranged
        whole = ask(port, f"/stores/{MEMORY_STORE}/all?{latest}&limit={len(categories)}").body
        assert len(whole["entries"]) == len(categories) and whole["truncated"] is False
        windows = ask(port, f"/stores/{STORE}/windows?{latest}&limit=3").body
        assert len(windows["windows"]) == 3 and windows["truncated"] is True

        # Refusals name the problem.
        unknown = get(port, "/stores/no-such-store/keys/x")
        assert unknown.status == 404 and STORE in unknown.body["error"]
        bad = get(port, f"/stores/{STORE}/keys/cat-01?time=yesterday")
        assert bad.status == 400 and "time" in bad.body["error"]
        bad_isolation = get(port, f"/stores/{STORE}/keys/cat-01?isolation=eventual")
        assert bad_isolation.status == 400 and "committed or latest" in bad_isolation.body["error"]
        wrong_kind = get(port, f"/stores/{STORE}/range?from=a&to=z")
        assert wrong_kind.status == 400 and "/windows" in wrong_kind.body["error"]
        absent = get(port, f"/stores/{STORE}/keys/never-seen?time={min(s for _, s in oracle)}")
        assert absent.status == 200 and absent.body["found"] is False

        health = get(port, "/health").body
        assert health["status"] == "running"
        if engine == "local":
            assert health["tasks_serving"] == health["tasks"] == 5
        else:
            assert sorted(health["slots"]) == ["0", "1"] and all(health["slots"].values())
            assert "fluvial_queries_routed_total" in get(port, "/metrics").body["text"]

        metrics = get(port, "/metrics").body["text"]
        served = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("fluvial_queries_served_total{")
        )
        assert served >= len(oracle)
        assert 'fluvial_queries_refused_total{reason="unknown_store"} 1.0' in metrics
        assert "fluvial_query_latency_seconds_bucket" in metrics
        assert "fluvial_worker_records_processed_total" in metrics
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()
