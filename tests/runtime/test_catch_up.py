"""Catch-up completeness: live input, a backlog and a replay after a reset give the same results.

Three operators behind re-keys (tests/runtime/apps/catch_up.py): a windowed count, a session
count and a stream-stream join, over 3 input partitions. Each partition's own disorder stays
within grace, so no record is late by its own partition's order and every record counts.
Three upstream tasks write each repartition topic, each at its own pace: with Kafka Streams'
rule the downstream stream time follows the fastest of them, and a backlog drops the slower
ones' records as late. fluvial reads repartition topics merged by writer (docs/semantics.md,
"Catch-up completeness"), so the three arrival patterns give the oracle's results exactly.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from fluvial import StreamsBuilder, serdes
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.processor.completeness import PROGRESS_HEADER, WRITER_HEADER, encode_progress
from fluvial.runtime.reset import reset_application
from tests.event_times import event_time_base_ms
from tests.runtime.apps import catch_up as app
from tests.runtime.harness import SparkRunner, committed_offset, flush, read_topic, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

APP = Path(app.__file__)
PARTITIONS = 3
CATEGORIES = ["news", "sports", "tech", "travel"]
WINDOW_KEY = serdes.time_windowed(serdes.string(), app.WINDOW_MS)
SESSION_KEY = serdes.session_windowed(serdes.string())
LONG = serdes.long()

Row = tuple[int, str, int, dict]  # partition, key, timestamp, value
MAX_DISORDER_MS = 900  # within a partition; under every operator's grace


def generate(seed: int, per_partition: int, base_ms: int) -> list[Row]:
    """Each partition spans the same event time, with its own disorder under 1 s (grace 2 s)."""
    rng = random.Random(seed)
    rows: list[Row] = []
    for partition in range(PARTITIONS):
        clock = base_ms
        for i in range(per_partition):
            clock += rng.randint(20, 80)
            ts = clock - rng.randint(0, MAX_DISORDER_MS) if rng.random() < 0.2 else clock
            value = {"id": f"{partition}-{i}", "category": rng.choice(CATEGORIES),
                     "session": f"s{rng.randrange(40)}", "bucket": f"b{rng.randrange(30)}"}  # fmt: skip
            rows.append((partition, f"user-{partition}-{i}", ts, value))
    return rows


def oracle(rows: list[Row]) -> dict[str, Counter]:
    """What every record counted once gives, in the shapes final_results() reads back."""
    windows = Counter((v["category"], ts - ts % app.WINDOW_MS) for _p, _k, ts, v in rows)
    sessions: Counter = Counter()
    by_key: dict[str, list[int]] = defaultdict(list)
    for _p, _k, ts, v in rows:
        by_key[v["session"]].append(ts)
    for key, times in by_key.items():
        times.sort()
        start = prev = times[0]
        n = 0
        for t in times:
            if t - prev > app.SESSION_GAP_MS:
                sessions[(key, start, prev)] = n
                start, n = t, 0
            prev, n = t, n + 1
        sessions[(key, start, prev)] = n
    left: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    right: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for _p, _k, ts, v in rows:
        side = left if v["category"] in ("news", "sports") else right
        side[v["bucket"]].append((ts, v))
    joined = Counter(
        (bucket, f"{a['id']}|{b['id']}")
        for bucket, lefts in left.items()
        for ta, a in lefts
        for tb, b in right[bucket]
        if abs(ta - tb) <= app.JOIN_DIFF_MS
    )
    return {"windows": windows, "sessions": sessions, "joined": joined}


def final_results(bootstrap: str, out: str) -> dict[str, Counter]:
    windows: dict = {}
    sessions: dict = {}
    joined: Counter = Counter()
    for partition in range(PARTITIONS):
        for m in read_topic(bootstrap, f"{out}-windows", partition=partition):
            w = WINDOW_KEY.deserialize(None, m.key())
            windows[(w.key, w.window.start_ms)] = LONG.deserialize(None, m.value())
        for m in read_topic(bootstrap, f"{out}-sessions", partition=partition):
            s = SESSION_KEY.deserialize(None, m.key())
            key = (s.key, s.window.start_ms, s.window.end_ms)
            if m.value() is None:
                sessions.pop(key, None)  # merged into a larger session
            else:
                sessions[key] = LONG.deserialize(None, m.value())
        for m in read_topic(bootstrap, f"{out}-joined", partition=partition):
            joined[(m.key().decode(), m.value().decode())] += 1
    return {"windows": Counter(windows), "sessions": Counter(sessions), "joined": joined}


def produce(bootstrap: str, topic: str, rows: list[Row], pace_s: float = 0.0) -> None:
    """Each partition in its own order; paced, the partitions advance together."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "partitioner": "murmur2_random",
        }
    )
    by_partition = [[r for r in rows if r[0] == p] for p in range(PARTITIONS)]
    for row in zip(*by_partition, strict=True):
        for partition, key, ts, value in row:
            producer.produce(topic, key=key.encode(), value=json.dumps(value).encode(),
                             partition=partition, timestamp=ts)  # fmt: skip
        if pace_s:
            producer.poll(0)
            time.sleep(pace_s)
    flush(producer)
    # The tests' premise: idempotence keeps a retried batch in its place, so each partition's
    # disorder stays what generate() made it.
    for partition in range(PARTITIONS):
        newest = -1
        for m in read_topic(bootstrap, topic, partition=partition):
            _, ts = m.timestamp()
            assert ts > newest - MAX_DISORDER_MS, (
                f"{topic}-{partition} out of order at {m.offset()}"
            )
            newest = max(newest, ts)


def complete(found: dict[str, Counter], expected: dict[str, Counter]) -> bool:
    """Every record is in: the counts add up and every expected pair is there."""
    return (
        sum(found["windows"].values()) >= sum(expected["windows"].values())
        and sum(found["sessions"].values()) >= sum(expected["sessions"].values())
        and sum(found["joined"].values()) >= sum(expected["joined"].values())
    )


def make_topics(bootstrap: str, unique_name, label: str) -> tuple[str, str]:  # noqa: ANN001
    """A new input topic and output prefix, each topic with PARTITIONS partitions."""
    source, out = unique_name(f"{label}-in"), unique_name(f"{label}-out")
    names = [source] + [f"{out}-{kind}" for kind in ("windows", "sessions", "joined")]
    create_topics(bootstrap, [TopicSpec(n, PARTITIONS) for n in names])
    return source, out


def differences(found: dict[str, Counter], expected: dict[str, Counter], log: str) -> str:
    """The first differences per result, and the run's log lines about failures and drops."""
    lines = []
    for kind in expected:
        extra, missing = found[kind] - expected[kind], expected[kind] - found[kind]
        if extra or missing:
            lines.append(f"{kind}: {sum(extra.values())} extra {list(extra.items())[:5]}, "
                         f"{sum(missing.values())} missing {list(missing.items())[:5]}")  # fmt: skip
    noted = [line for line in log.splitlines()
             if any(word in line for word in ("fail", "restart", "dropping"))]  # fmt: skip
    return "\n".join(lines + noted[-20:])


def wait_for_results(
    runner: SparkRunner, bootstrap: str, out: str, expected: dict[str, Counter], what: str
) -> AssertionError | None:
    """Wait until every expected result is in, or the application exits; the timeout if it
    came first (the caller stops the application, then reports what was missing)."""
    try:
        wait_until(lambda: complete(final_results(bootstrap, out), expected)
                   or runner.proc.poll() is not None, 300, what)  # fmt: skip
    except AssertionError as exc:
        return exc
    return None


def start_local(bootstrap: str, app_id: str, source: str, out: str, state_dir: Path,
                extra_env: dict[str, str] | None = None) -> SparkRunner:  # fmt: skip
    """The catch-up app on the local engine, committing every 100 ms, running its tasks."""
    runner = SparkRunner(bootstrap, app_id, source, out, state_dir, engine="local", app=APP,
                         commit_ms=100, extra_env=extra_env or {})  # fmt: skip
    runner.start()
    runner.wait_ready(240)
    return runner


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.soak)])
def test_live_backlog_and_replay_give_the_same_results(
    engine: str, bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    rows = generate(seed=24, per_partition=500, base_ms=event_time_base_ms())
    expected = oracle(rows)
    span_s = (max(r[2] for r in rows) - min(r[2] for r in rows)) / 1000

    def topics(label: str) -> tuple[str, str]:
        return make_topics(bootstrap_servers, unique_name, label)

    logs: list[str] = []

    def run(app_id: str, source: str, out: str, feed=None) -> dict[str, Counter]:  # noqa: ANN001
        runner = SparkRunner(bootstrap_servers, app_id, source, out, tmp_path / app_id,
                             engine=engine, app=APP, lease_ms=5000, commit_ms=100)  # fmt: skip
        runner.start()
        try:
            runner.wait_ready(240)
            if feed is not None:
                feed()
            timed_out = wait_for_results(runner, bootstrap_servers, out, expected,
                                         f"every result ({engine}, {app_id})")  # fmt: skip
        finally:
            code = runner.stop()
        assert code == 0, runner.output()[-3000:]
        found = final_results(bootstrap_servers, out)
        logs.append(runner.output())
        if timed_out is not None:
            raise AssertionError(f"{timed_out}\n{differences(found, expected, logs[-1])}")
        return found

    # Live: the application runs first, the input arrives at about 15x real time.
    source, out = topics("live")
    pace = span_s / 15 / (len(rows) // PARTITIONS)
    live = run(unique_name("live"), source, out,
               feed=lambda: produce(bootstrap_servers, source, rows, pace_s=pace))  # fmt: skip
    assert live == expected, differences(live, expected, logs[-1])

    # A backlog: all input is there before the application starts.
    source, out = topics("backlog")
    produce(bootstrap_servers, source, rows)
    app_id = unique_name("backlog")
    backlog = run(app_id, source, out)
    assert backlog == expected, differences(backlog, expected, logs[-1])

    # The same application reset and replayed, into new output topics to read them alone.
    reset_application(app_id, bootstrap_servers, tmp_path / app_id)
    _, replay_out = topics("replay")
    replay = run(app_id, source, replay_out)
    assert replay == expected, differences(replay, expected, logs[-1])


def test_a_backlog_killed_midway_and_restarted_gives_the_same_results(
    bootstrap_servers: str, unique_name, tmp_path: Path
) -> None:
    """kill -9 in the middle of a backlog, then a restart from the last commit.

    The downstream tasks take repartition records out of offset order, so their commits carry
    what they knew of each writer and its last record taken. The restart must skip those
    records: processed again, they would count twice in an open window and be dropped as late
    from a closed one."""
    rows = generate(seed=31, per_partition=3000, base_ms=event_time_base_ms())
    expected = oracle(rows)
    source, out = make_topics(bootstrap_servers, unique_name, "killed")
    produce(bootstrap_servers, source, rows)
    app_id = unique_name("killed")

    def start(pause_ms: int = 0) -> SparkRunner:
        return start_local(bootstrap_servers, app_id, source, out, tmp_path / app_id,
                           {"FLUVIAL_TEST_PAUSE_MS": str(pause_ms)})  # fmt: skip

    # 6 ms per record: the backlog takes at least 18 s (3,000 records per partition, a worker
    # each), and its first committed results come long before.
    first = start(pause_ms=6)
    try:
        wait_until(lambda: read_topic(bootstrap_servers, f"{out}-windows", partition=0)
                   or first.proc.poll() is not None, 240, "the first committed results")  # fmt: skip
        taken = [committed_offset(bootstrap_servers, app_id, source, p) for p in range(PARTITIONS)]
    finally:
        first.kill9()
    assert first.proc.returncode == -9, first.output()[-3000:]
    # The downstream tasks' results come while the upstream tasks still work through the
    # backlog: their repartition records are not queued behind the rest of the input.
    assert sum(taken) < len(rows), (
        f"the first results came only after the whole backlog was taken ({taken} of "
        f"{len(rows) // PARTITIONS} per partition)\n{first.output()[-3000:]}"
    )
    at_kill = final_results(bootstrap_servers, out)
    assert not complete(at_kill, expected), "the backlog was done before the kill: add input"

    second = start()
    try:
        timed_out = wait_for_results(second, bootstrap_servers, out, expected,
                                     "every result after the restart")  # fmt: skip
    finally:
        code = second.stop()
    assert code == 0, second.output()[-3000:]
    found = final_results(bootstrap_servers, out)
    assert timed_out is None and found == expected, (
        f"{timed_out or ''}\n{differences(found, expected, second.output())}"
    )


def test_a_restart_skips_what_was_taken_above_a_held_offset(
    bootstrap_servers: str, unique_name, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The offset a merged repartition partition commits can stay put for many commits: at a
    record of one writer that waits for the others, while the task takes their records above
    it. Only the writer states committed beside the offset say what was taken, so every
    commit must carry them, whether the offset moved or not.

    The test writes the windowed count's repartition partition itself, as three upstream
    writers would: writer a's one record far ahead at offset 0, then b's and c's records
    interleaved. No task of the application has these writer ids (its own upstream tasks read
    an empty input, say so, and hold nothing back), so a's record waits until b and c say they
    have read all of their input: the committed offset stays at 0 however fast the
    first run goes. The test kills the application after 2,000 window updates, writes the
    three writers' "read all" progress, restarts it, and checks every window count against
    the oracle."""
    base_ms = event_time_base_ms()
    source, out = make_topics(bootstrap_servers, unique_name, "held")
    app_id = unique_name("held")
    repartition = f"{app_id}-KSTREAM-AGGREGATE-STATE-STORE-0000000003-repartition"
    monkeypatch.setenv("FLUVIAL_TEST_INPUT", source)
    builder = StreamsBuilder()
    app.build(builder)
    read = {t for sub in builder.build().subtopologies(app_id) for t in sub.source_topics}
    assert repartition in read, f"the windowed count reads none of {sorted(read)}"
    create_topics(bootstrap_servers, [TopicSpec(repartition, PARTITIONS)])
    rng = random.Random(41)
    # Far under the 100,000 records a merge queue holds before it lets the oldest go anyway.
    per_writer, step_ms = 20_000, 5
    ahead = base_ms + per_writer * step_ms + 60_000
    records = [("a", "news", ahead)]  # (writer, key, timestamp), in offset order
    for i in range(per_writer):
        for writer in ("b", "c"):
            ts = base_ms + i * step_ms + rng.randrange(step_ms)
            records.append((writer, rng.choice(CATEGORIES), ts))
    json_serde = serdes.json()
    producer = Producer({"bootstrap.servers": bootstrap_servers, "enable.idempotence": True,
                         "queue.buffering.max.messages": 2 * len(records)})  # fmt: skip
    for writer, category, ts in records:
        producer.produce(repartition, key=json_serde.serialize(repartition, category),
                         value=json_serde.serialize(repartition, {"category": category}),
                         partition=0, timestamp=ts, headers=[(WRITER_HEADER, writer.encode())])  # fmt: skip
        producer.poll(0)
    flush(producer)

    def read_all_progress() -> None:
        """Each writer says it has read all of its input: one partition of the (empty) input
        topic, which ends at offset 0."""
        for writer in ("a", "b", "c"):
            high = max(ts for w, _c, ts in records if w == writer)
            headers = [(PROGRESS_HEADER, encode_progress(high, True, ((source, 0, 0),))),
                       (WRITER_HEADER, writer.encode())]  # fmt: skip
            producer.produce(repartition, partition=0, timestamp=high, headers=headers)
        flush(producer)

    expected = Counter((category, ts - ts % app.WINDOW_MS) for _w, category, ts in records)

    def start() -> SparkRunner:
        return start_local(bootstrap_servers, app_id, source, out, tmp_path / app_id)

    def window_counts() -> Counter:
        return final_results(bootstrap_servers, out)["windows"]

    def window_updates() -> int:
        return sum(len(read_topic(bootstrap_servers, f"{out}-windows", partition=p))
                   for p in range(PARTITIONS))  # fmt: skip

    def committed_offset() -> list[int] | None:
        consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": app_id})
        try:
            [tp] = consumer.committed([TopicPartition(repartition, 0)], timeout=10)
            return [tp.offset]
        except KafkaException:  # the coordinator is loading: ask again
            return None
        finally:
            consumer.close()

    def log_end() -> int:
        consumer = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": app_id})
        try:
            return consumer.get_watermark_offsets(TopicPartition(repartition, 0), timeout=30)[1]
        finally:
            consumer.close()

    first = start()
    try:
        wait_until(lambda: window_updates() >= 2_000 or first.proc.poll() is not None, 240,
                   "2,000 committed window updates")  # fmt: skip
    finally:
        first.kill9()
    assert first.proc.returncode == -9, first.output()[-3000:]
    [held] = wait_until(committed_offset, 60, "the committed offset")
    assert held == 0, (
        f"writer a's record went before the writers said they read all (offset {held})"
    )

    read_all_progress()
    end = log_end()
    second = start()
    try:
        timed_out = None
        try:
            # Its results commit with its offset: once that reaches the end, every record has
            # counted (or been counted again, or dropped).
            wait_until(lambda: (committed_offset() or [-1])[0] >= end
                       or second.proc.poll() is not None, 300,
                       f"the repartition partition taken to its end ({end})")  # fmt: skip
        except AssertionError as exc:
            timed_out = exc
    finally:
        code = second.stop()
    assert code == 0, second.output()[-3000:]
    found = window_counts()
    wrong = {w: (found[w], n) for w, n in expected.items() if found[w] != n}
    assert timed_out is None and found == expected, (
        f"{timed_out or ''}\n{len(wrong)} of {len(expected)} window counts wrong, "
        f"(found, expected): {dict(list(wrong.items())[:5])}\n{second.output()[-2000:]}"
    )
