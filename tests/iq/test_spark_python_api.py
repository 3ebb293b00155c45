"""``SparkApplication.store()`` and ``query_metadata_for_key()``: the local engine's Python views
on the Spark driver, each read routed to the executor that holds the key's task."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from fluvial.errors import StreamsError
from fluvial.iq.queries import (
    QueryError,
    StoreUnavailableError,
    UnknownStoreError,
    default_partition,
)
from fluvial.records import Window
from fluvial.spark.engine import SparkApplication
from tests.iq.harness import counts_of, in_grace_views
from tests.runtime.harness import WINDOW_MS, PageView, produce, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.slow]

APP = Path(__file__).parent / "apps" / "stores.py"
SESSION_GAP_MS = 300


def answers(question):  # noqa: ANN001, ANN201
    """The answer, or ``None`` while the owning task is not serving yet (503 over HTTP)."""
    try:
        return question()
    except StoreUnavailableError:
        return None


def served(question, timeout_s: float = 120):  # noqa: ANN001, ANN201
    """The answer, asked again while the owning slot moves between Python processes (a
    lease lands in another process about half the time on ``local[2]``), as a client would."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return question()
        except StoreUnavailableError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def session_counts(views: list[PageView]) -> dict[str, list[tuple[int, int, int]]]:
    """Every category's sessions as (start, end, count): runs of long views no more than the
    inactivity gap apart (no view is late, so arrival order does not matter)."""
    times: dict[str, list[int]] = defaultdict(list)
    for view in views:
        if view.period >= 30000:
            times[view.category].append(view.timestamp_ms)
    sessions = {}
    for category, stamps in times.items():
        stamps.sort()
        runs = [[stamps[0], stamps[0], 1]]
        for t in stamps[1:]:
            if t - runs[-1][1] <= SESSION_GAP_MS:
                runs[-1][1], runs[-1][2] = t, runs[-1][2] + 1
            else:
                runs.append([t, t, 1])
        sessions[category] = [tuple(run) for run in runs]
    return sessions


def test_python_views_on_the_spark_driver_equal_the_oracle(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path, monkeypatch
) -> None:
    views = in_grace_views(seed=13, count=1500)
    windowed = counts_of(views)
    totals: dict[str, int] = defaultdict(int)
    for (category, _), count in windowed.items():
        totals[category] += count
    sessions = session_counts(views)
    input_topic = topic_factory("views")
    for name, value in {
        "FLUVIAL_TEST_INPUT": input_topic, "FLUVIAL_TEST_APP_ID": unique_name("app"),
        "FLUVIAL_TEST_BOOTSTRAP": bootstrap_servers,
        "FLUVIAL_TEST_STATE_DIR": str(tmp_path / "state"),
    }.items():  # fmt: skip
        monkeypatch.setenv(name, value)
    app = SparkApplication(APP, master="local[2]", slots=2, lease_seconds=3.0,
                           spark_conf={"spark.driver.memory": "1g"})  # fmt: skip
    with pytest.raises(StreamsError, match="start"):
        app.store("totals")
    app.start()
    try:
        produce(bootstrap_servers, input_topic, views)
        store = app.store("totals")
        wait_until(lambda: answers(lambda: dict(store.all())) == totals, 240,
                   "committed totals on the driver to equal the oracle")  # fmt: skip
        app.raise_if_failed()

        # Key-value: the same decoded values as the local engine's views.
        assert served(lambda: store.get("cat-03")) == totals["cat-03"]
        assert served(lambda: store.get("never-seen")) is None
        assert served(store.approximate_num_entries) >= 1
        some = sorted(totals)[2:6]
        assert served(lambda: store.range(some[0], some[-1])) == [(c, totals[c]) for c in some]
        assert served(lambda: store.all(isolation="latest")) == sorted(totals.items())

        # Window store: one window, a range of windows, every key's windows in start order.
        window_store = app.store("windowed")
        for (category, start), count in sorted(windowed.items()):
            found = served(lambda c=category, s=start: window_store.fetch(c, s))
            assert found == count, (category, start)
        (category, start), _ = sorted(windowed.items())[5]
        assert served(lambda: window_store.fetch(category, start + 1)) is None
        ranged = served(lambda: window_store.fetch(category, start, start + 3 * WINDOW_MS))
        assert ranged == [
            (Window(s, s + WINDOW_MS), windowed[(category, s)])
            for s in range(start, start + 4 * WINDOW_MS, WINDOW_MS)
            if (category, s) in windowed
        ]
        every = served(lambda: window_store.fetch_all(0, 2**62))
        assert {(w.key, w.window.start_ms): v for w, v in every} == windowed
        assert [w.window.start_ms for w, _ in every] == sorted(w.window.start_ms for w, _ in every)

        # Session store: every category's sessions, bounds inclusive, with their counts.
        session_store = app.store("sessions")
        for category, expected in sorted(sessions.items()):
            found = served(lambda c=category: session_store.fetch(c))
            assert [(w.key, w.window.start_ms, w.window.end_ms, v) for w, v in found] == [
                (category, *session) for session in expected
            ], category

        # The in-memory store keeps no committed copy: committed reads are refused, latest work.
        with pytest.raises(QueryError, match="in memory"):
            served(lambda: app.store("totals-in-memory").get("cat-03"))
        latest = app.store("totals-in-memory", isolation="latest")
        assert served(lambda: latest.get("cat-03")) == totals["cat-03"]

        with pytest.raises(UnknownStoreError, match="windowed"):
            app.store("nope")
        with pytest.raises(QueryError, match="committed or latest"):
            app.store("totals", isolation="dirty")

        # Every key's owner, and where its standby is: the other slot.
        owners = set()
        for category in sorted(totals):
            metadata = app.query_metadata_for_key("totals", category)
            assert metadata.partition == default_partition(category.encode(), 3)
            assert str(metadata.task) == f"1_{metadata.partition}"
            assert metadata.active_slot == metadata.partition % 2
            assert metadata.standby_slots == (1 - metadata.active_slot,)
            assert metadata.active_endpoint and len(metadata.standby_endpoints) == 1
            owners.add(metadata.active_slot)
        assert owners == {0, 1}, "keys of both slots were read"
        app.raise_if_failed()
    finally:
        app.close(120)
    app.raise_if_failed()
