"""Committed reads are never taken back: queries through kill -9 crashes, and during restores."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tests.iq.harness import STORE, ServedRunner, counts_of, get, in_grace_views
from tests.runtime.harness import produce, read_revisions, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

CRASHES = 5


class Querier(threading.Thread):
    """Asks for random windows, one query at a time, and keeps every answer in order."""

    def __init__(self, runner: ServedRunner, windows: list[tuple[str, int]], isolation: str):
        super().__init__(daemon=True)
        self.runner = runner
        self.windows = windows
        self.isolation = isolation
        self.stop_event = threading.Event()
        self.answers: list[tuple[tuple[str, int], int]] = []
        self.unavailable = 0
        self.unavailable_reasons: list[str] = []
        self.refused_connections = 0
        self.errors: list[str] = []

    def run(self) -> None:
        rng = random.Random(7)
        while not self.stop_event.is_set():
            category, start = rng.choice(list(self.windows))
            path = f"/stores/{STORE}/keys/{category}?time={start}&isolation={self.isolation}"
            try:
                answer = get(self.runner.port, path, timeout=5)
            except OSError:
                # The process is down, not serving yet, or was killed while it answered.
                self.refused_connections += 1
                time.sleep(0.02)
                continue
            if answer.status == 503:
                if "Retry-After" not in answer.headers and "retry-after" not in answer.headers:
                    self.errors.append(f"503 without Retry-After: {answer.body}")
                self.unavailable += 1
                self.unavailable_reasons.append(answer.body.get("error", ""))
            elif answer.status != 200:
                self.errors.append(f"{answer.status}: {answer.body}")
            elif answer.body["found"]:
                self.answers.append(((category, start), answer.body["value"]))

    def count_for(self, seconds: float) -> int:
        assert self.is_alive() or self.stop_event.is_set(), "the querier thread died"
        before = len(self.answers)
        time.sleep(seconds)
        return len(self.answers) - before


READERS = pytest.mark.parametrize(
    "reader",
    [
        pytest.param(True, id="reader-process"),
        pytest.param(False, id="in-process", marks=pytest.mark.soak),
    ],
)


def check_serving_from(runner: ServedRunner, reader: bool) -> None:
    """Committed reads come from a reader process, or from the application's own."""
    assert (runner.reader_pid() is not None) == reader, runner.output()


@READERS
def test_no_committed_answer_is_taken_back_through_kill9_crashes(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, reader: bool
) -> None:
    views = in_grace_views(seed=3, count=8000)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state", commit_ms=300,
                          reader=reader)  # fmt: skip
    querier = Querier(runner, sorted(oracle), "committed")
    chunks = [views[i : i + 800] for i in range(0, len(views), 800)]
    runner.start()
    try:
        runner.wait_serving()
        check_serving_from(runner, reader)
        querier.start()
        produce(bootstrap_servers, runner.input_topic, chunks[0])
        for crash in range(CRASHES):
            # Ask about the windows being counted right now: those a crash would take back.
            querier.windows = sorted(counts_of(chunks[crash + 1]))
            produce(bootstrap_servers, runner.input_topic, chunks[crash + 1])
            # Crash while answering queries and processing new input.
            wait_until(lambda: querier.count_for(0.3) > 0, 60, "answers before the crash")
            runner.kill9()
            runner.start()
            runner.wait_serving()
            check_serving_from(runner, reader)
        for chunk in chunks[CRASHES + 1 :]:
            produce(bootstrap_servers, runner.input_topic, chunk)
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   180, "the committed output to reach the oracle")  # fmt: skip
        querier.count_for(1.0)
        querier.stop_event.set()
        querier.join(10)
        assert runner.stop() == 0, runner.output()
    finally:
        querier.stop_event.set()
        if runner.alive():
            runner.kill9()

    assert not querier.errors, querier.errors[:5]
    revisions: dict[tuple[str, int], set[int]] = defaultdict(set)
    for window, count in read_revisions(bootstrap_servers, runner.output_topic):
        revisions[window].add(count)
    assert len(querier.answers) > 200, len(querier.answers)
    last: dict[tuple[str, int], int] = {}
    for window, value in querier.answers:
        # Each answer is a state some committed transaction produced ...
        assert value in revisions[window], (window, value, sorted(revisions[window]))
        # ... and no later answer goes back behind it, crash or not.
        assert value >= last.get(window, 0), (window, value, last[window])
        last[window] = value


@READERS
def test_a_query_during_restore_gets_503_with_retry_after_never_a_wrong_value(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, reader: bool
) -> None:
    # 40 minutes of event time: about 6,000 windows of the 12 categories, so the changelog,
    # which a commit writes each changed window to once, takes a while to restore.
    views = in_grace_views(seed=4, count=12000, max_step_ms=400)
    oracle = counts_of(views)
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state", reader=reader)  # fmt: skip
    runner.start()
    try:
        runner.wait_serving()
        produce(bootstrap_servers, runner.input_topic, views)
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   180, "the committed output to reach the oracle")  # fmt: skip
        assert runner.stop() == 0, runner.output()
        # Without local state every task restores its whole changelog on the next start.
        shutil.rmtree(runner.state_dir / runner.app_id)

        querier = Querier(runner, sorted(oracle), "committed")
        querier.start()
        runner.start()
        runner.wait_serving()
        check_serving_from(runner, reader)
        wait_until(lambda: querier.count_for(0.5) > 20, 60, "answers after the restore")
        querier.stop_event.set()
        querier.join(10)
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()

    assert not querier.errors, querier.errors[:5]
    restoring = [r for r in querier.unavailable_reasons if "restoring its state" in r]
    assert restoring, "no query met a restoring task: it must be refused with 503"
    wrong = [(w, v) for w, v in querier.answers if v != oracle[w]]
    assert not wrong, f"answers from a partly restored store: {wrong[:5]}"


@READERS
def test_latest_shows_state_a_crash_takes_back_and_committed_never_does(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, reader: bool
) -> None:
    """The control of the crash test above: the answers it must never see exist.

    The application commits every 20 s, in one worker: with two, one worker's commit would
    release repartitioned records that the other counts and commits at any moment after. Once
    a window's count is processed and waits for the next commit, ``latest`` answers it while ``committed`` and the committed output do not. A
    kill -9 then aborts that transaction: what ``latest`` answered was never committed. After
    the restart both reach the final count, and the output holds each revision once.
    """
    views = in_grace_views(seed=5, count=800)
    oracle = counts_of(views)
    (category, start), expected = max(oracle.items(), key=lambda item: item[1])
    path = f"/stores/{STORE}/keys/{category}?time={start}&isolation="
    runner = ServedRunner(bootstrap_servers, unique_name("app"), topic_factory("views"),
                          topic_factory("counts"), tmp_path / "state", commit_ms=20_000,
                          workers=1, reader=reader)  # fmt: skip

    def value(isolation: str) -> int | None:
        answer = get(runner.port, path + isolation)
        assert answer.status == 200, (isolation, answer.status, answer.body)
        return answer.body["value"] if answer.body["found"] else None

    def committed_output() -> list[int]:
        return [n for w, n in read_revisions(bootstrap_servers, runner.output_topic)
                if w == (category, start)]  # fmt: skip

    runner.start()
    try:
        runner.wait_serving()
        check_serving_from(runner, reader)
        produce(bootstrap_servers, runner.input_topic, views)
        # The repartitioned records commit first; the counts wait for the commit after.
        wait_until(lambda: value("latest") == expected, 180, "latest to answer the count")
        committed_before, output_before = value("committed"), committed_output()
        runner.kill9()
        assert committed_before is None and output_before == [], (committed_before, output_before)
        runner.start()
        runner.wait_serving()
        wait_until(lambda: dict(read_revisions(bootstrap_servers, runner.output_topic)) == oracle,
                   180, "the committed output to reach the oracle")  # fmt: skip
        wait_until(lambda: value("committed") == expected, 60, "committed to answer the count")
        assert value("latest") == expected
        assert runner.stop() == 0, runner.output()
    finally:
        if runner.alive():
            runner.kill9()
    assert committed_output() == list(range(1, expected + 1))
