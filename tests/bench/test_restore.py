"""fluvial bench restore end to end on a tiny store: both systems restore the same changelog,
count every record and answer a key; it proves the harness works, not any speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fluvial.bench.restore import changelog_topic, key_of, restore_topology, value_of
from fluvial.kafka.admin import admin_client
from tests.reference.conftest import reference_jar  # noqa: F401 - a fixture, used by name

pytestmark = [pytest.mark.slow, pytest.mark.kafka]


@pytest.mark.usefixtures("reference_jar")  # Kafka Streams' side, built once per session
def test_both_systems_restore_every_record_of_the_same_changelog(
    bootstrap_servers: str, tmp_path: Path
) -> None:
    from fluvial.bench.restore import run_restore_bench

    out = tmp_path / "restore.json"
    lines: list[str] = []
    data = run_restore_bench(
        keys=4_000, partitions=3, value_bytes=50, bootstrap=bootstrap_servers, json_out=out,
        say=lines.append,
    )  # fmt: skip

    assert json.loads(out.read_text()) == data
    runs = {run["system"]: run for run in data["runs"]}
    assert list(runs) == ["fluvial-local", "kafka-streams"]  # one after the other
    for run in runs.values():
        assert run["status"] == "ok", run.get("reason")
        # Every changelog record was restored, the store holds every key once, and the key in
        # the middle answers with the value written for it.
        assert run["restored"] == run["entries"] == 4_000
        assert run["key"] == key_of(2_000)
        assert run["value_found"] and run["complete"]
        assert run["records_per_s"] > 0 and run["cpu_us_per_record"] > 0
        assert 0 < run["seconds"] <= run["from_start_s"]
    ratios = data["ratios"]
    assert ratios["records_per_s"] == pytest.approx(
        runs["fluvial-local"]["records_per_s"] / runs["kafka-streams"]["records_per_s"]
    )
    assert any(line.startswith("[2/2] kafka-streams restores 4,000 rows") for line in lines)
    # The bench leaves no topic of its applications behind.
    topics = admin_client(bootstrap_servers).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith("bench-restore-")]


def test_the_changelog_is_the_one_fluvial_and_kafka_streams_name() -> None:
    # Kafka Streams names a table store's changelog <application id>-<store>-changelog; the
    # bench fills that topic for both.
    assert changelog_topic("app") == "app-kv-changelog"
    [sub] = restore_topology("in").subtopologies("app")
    assert list(sub.source_topics) == ["in"]
    assert value_of(7, 20) == "value-7-" + "x" * 12
