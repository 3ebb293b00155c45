"""Window changelogs keep what their stores need, and a restore never comes back short.

The session's broker checks retention every 5 s, so a changelog that expires records by their
event time would lose them within a test's run.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec, ResourceType

from fluvial import KeyValue, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import ChangelogGapError
from fluvial.runtime import Application
from tests.event_times import event_time_base_ms
from tests.runtime.harness import (
    GRACE_MS,
    WINDOW_MS,
    PageView,
    Runner,
    check_revisions_exactly_once,
    committed_offset,
    generate_views,
    oracle_counts,
    produce,
    read_revisions,
    read_topic,
    wait_until,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

STORE_CHANGELOG = "{app}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-changelog"


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset, -1 while the group coordinator is still loading."""
    try:
        return committed_offset(bootstrap, group, topic)
    except KafkaException:
        return -1


def log_start(bootstrap: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [(_tp, future)] = admin.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()}).items()
    return future.result(timeout=30).offset


def topic_config(bootstrap: str, topic: str, name: str) -> str:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [future] = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return future.result(timeout=30)[name].value


def test_backfill_of_30_day_old_events_survives_kill_9_and_lost_state(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """Figure 2 over event times 30 days old, exactly-once, killed -9 three times.

    Every restart also loses its local state (as when a task moves to a new machine), so each
    restore reads the whole window changelog: had the broker expired it by event time, the
    counts would come back short.
    """
    views = generate_views(seed=31, count=3000, start_ms=event_time_base_ms(days_ago=30))
    oracle, dropped = oracle_counts(views)
    assert dropped > 0, "the input must include records later than grace"
    input_topic = topic_factory("pageviews")
    output_topic = topic_factory("counts")
    state_dir = tmp_path / "state"
    runner = Runner(bootstrap_servers, unique_name("app"), input_topic, output_topic,
                    state_dir, commit_ms=200)  # fmt: skip
    changelog = STORE_CHANGELOG.format(app=runner.app_id)
    batches = [views[i : i + 750] for i in range(0, len(views), 750)]
    try:
        _run_backfill(bootstrap_servers, runner, input_topic, output_topic, batches, oracle)
    except AssertionError as failure:
        raise AssertionError(f"{failure}\n--- fluvial run ---\n{runner.output()[-3000:]}") from None
    finally:
        if runner.proc is not None and runner.proc.poll() is None:
            runner.kill9()
    check_revisions_exactly_once(read_revisions(bootstrap_servers, output_topic), oracle)
    assert topic_config(bootstrap_servers, changelog, "message.timestamp.type") == "LogAppendTime"
    assert log_start(bootstrap_servers, changelog) == 0, "the broker deleted changelog records"


def _run_backfill(
    bootstrap: str,
    runner: Runner,
    input_topic: str,
    output_topic: str,
    batches: list[list[PageView]],
    oracle: dict[tuple[str, int], int],
) -> None:
    """Produce batch by batch; between batches, kill -9 and wipe the local state."""
    runner.start()
    done = 0
    for index, batch in enumerate(batches):
        produce(bootstrap, input_topic, batch)
        if index == len(batches) - 1:
            break
        wanted = done + len(batch) // 2
        wait_until(
            lambda wanted=wanted: committed(bootstrap, runner.app_id, input_topic) >= wanted,
            180,
            "part of the batch to be committed",
        )
        # Past two retention checks of the broker: an event-time-stamped changelog of
        # 30-day-old windows would be gone by now.
        time.sleep(11)
        done = committed(bootstrap, runner.app_id, input_topic)
        runner.kill9()
        shutil.rmtree(runner.state_dir / runner.app_id, ignore_errors=True)
        runner.start()
    wait_until(
        lambda: dict(read_revisions(bootstrap, output_topic)) == oracle,
        240,
        "the committed output to reach the oracle's final counts",
    )
    assert runner.stop() == 0, runner.output()


def figure2(input_topic: str, output_topic: str) -> StreamsBuilder:
    builder = StreamsBuilder()
    (
        builder.stream(input_topic, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view))
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=GRACE_MS))
        .count()
        .to_stream()
        .to(
            output_topic,
            key_serde=serdes.time_windowed(serdes.string(), WINDOW_MS),
            value_serde=serdes.long(),
        )
    )
    return builder


def test_a_restore_from_a_truncated_changelog_fails_loudly(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    """Records a store still needs were deleted: the application stops, it does not go on.

    The changelog is truncated to its end with DeleteRecords (what retention does) and the
    local state is removed (a task moved to a new machine). More records then arrive for the
    same windows. Restoring from what is left would count them from zero.
    """
    base = event_time_base_ms()
    views = generate_views(seed=5, count=400, start_ms=base)
    input_topic = topic_factory("pageviews")
    output_topic = topic_factory("counts")
    app_id = unique_name("app")
    config = StreamsConfig(
        application_id=app_id,
        bootstrap_servers=bootstrap_servers,
        processing_guarantee="exactly_once_v2",
        commit_interval_ms=100,
        state_dir=str(tmp_path / "state"),
        cache_max_bytes=0,
    )
    topology = figure2(input_topic, output_topic).build()
    produce(bootstrap_servers, input_topic, views[:300])
    first, _ = oracle_counts(views[:300])
    with Application(topology, config) as app:
        wait_until(
            lambda: dict(read_revisions(bootstrap_servers, output_topic)) == first,
            120,
            "the first 300 records' counts to be committed",
        )
    app.raise_if_failed()
    outputs_before = len(read_topic(bootstrap_servers, output_topic))

    changelog = STORE_CHANGELOG.format(app=app_id)
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    _low, high = _watermarks(bootstrap_servers, changelog)
    assert high > 0
    for future in admin.delete_records([TopicPartition(changelog, 0, high)]).values():
        future.result(timeout=30)
    shutil.rmtree(tmp_path / "state" / app_id)
    produce(bootstrap_servers, input_topic, views[300:])

    app = Application(topology, config)
    app.start()
    try:
        assert app.wait(120), "the application went on with a truncated changelog"
    finally:
        app.close()
    assert len(app.errors) == 1 and isinstance(app.errors[0], ChangelogGapError), app.errors
    message = str(app.errors[0])
    assert changelog in message and f"fluvial reset {app_id}" in message
    assert "windowstore_changelog_additional_retention_ms" in message
    assert sum(m.restore_gaps for m in app.metrics()) == 1
    # Nothing was processed past the gap: no input committed, no output written.
    assert committed_offset(bootstrap_servers, app_id, input_topic) == 300
    assert len(read_topic(bootstrap_servers, output_topic)) == outputs_before


def _watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()
