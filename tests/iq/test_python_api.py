"""``Application.store()`` and ``query_metadata_for_key()`` on the local engine, in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from fluvial import KeyValue, Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.errors import StreamsError
from fluvial.iq.queries import (
    QueryError,
    StoreUnavailableError,
    UnknownStoreError,
    default_partition,
)
from fluvial.records import Window
from fluvial.runtime import Application
from tests.iq.harness import counts_of, in_grace_views
from tests.runtime.harness import WINDOW_MS, produce, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.slow]


def answers(question):  # noqa: ANN001, ANN201
    """The answer, or ``None`` while the owning task is not serving yet (503 over HTTP)."""
    try:
        return question()
    except StoreUnavailableError:
        return None


def topology(input_topic: str):
    builder = StreamsBuilder()
    long_views = (
        builder.stream(input_topic, key_serde=serdes.string(), value_serde=serdes.json())
        .filter(lambda key, view: view["period"] >= 30000)
        .map(lambda key, view: KeyValue(view["category"], view["period"]))
        .repartition(num_partitions=3, key_serde=serdes.string(), value_serde=serdes.long())
    )
    (
        long_views.group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(size_ms=WINDOW_MS, grace_ms=2000))
        .count(materialized=Materialized.as_("windowed").with_retention(3_600_000))
    )
    long_views.group_by_key().count(materialized=Materialized.as_("totals"))
    long_views.group_by_key().count(
        materialized=Materialized.as_("totals-in-memory").with_store_type("in_memory")
    )
    return builder.build()


def test_stores_answer_through_their_serdes_in_both_isolations(
    bootstrap_servers: str, topic_factory, unique_name, tmp_path: Path
) -> None:
    views = in_grace_views(seed=11, count=1500)
    windowed = counts_of(views)
    totals: dict[str, int] = {}
    for (category, _), count in windowed.items():
        totals[category] = totals.get(category, 0) + count
    input_topic = topic_factory("views")
    config = StreamsConfig(application_id=unique_name("app"), bootstrap_servers=bootstrap_servers,
                           processing_guarantee="exactly_once_v2", commit_interval_ms=200,
                           state_dir=str(tmp_path / "state"))  # fmt: skip
    app = Application(topology(input_topic), config, workers=2)
    with pytest.raises(StreamsError, match="start"):
        app.store("totals")
    with app:
        produce(bootstrap_servers, input_topic, views)
        store = app.store("totals")
        wait_until(lambda: answers(lambda: dict(store.all())) == totals, 120,
                   "committed totals to match")  # fmt: skip

        assert store.get("cat-03") == totals["cat-03"]
        assert store.get("never-seen") is None
        assert store.approximate_num_entries() >= 1
        some = sorted(totals)[2:6]
        assert store.range(some[0], some[-1]) == [(c, totals[c]) for c in some]

        window_store = app.store("windowed")
        (category, start), count = sorted(windowed.items())[5]
        assert window_store.fetch(category, start) == count
        ranged = window_store.fetch(category, start, start + 3 * WINDOW_MS)
        assert ranged == [
            (Window(s, s + WINDOW_MS), windowed[(category, s)])
            for s in range(start, start + 4 * WINDOW_MS, WINDOW_MS)
            if (category, s) in windowed
        ]
        every = window_store.fetch_all(0, 2**62)
        assert {(w.key, w.window.start_ms): v for w, v in every} == windowed
        assert [w.window.start_ms for w, _ in every] == sorted(w.window.start_ms for w, _ in every)

        # The in-memory store keeps no committed copy: committed reads are refused, latest work.
        with pytest.raises(QueryError, match="in memory"):
            app.store("totals-in-memory").get("cat-03")
        latest = app.store("totals-in-memory", isolation="latest")
        wait_until(lambda: latest.get("cat-03") == totals["cat-03"], 60, "latest in-memory")

        with pytest.raises(UnknownStoreError, match="windowed"):
            app.store("nope")
        with pytest.raises(QueryError, match="committed or latest"):
            app.store("totals", isolation="dirty")

        metadata = app.query_metadata_for_key("totals", "cat-03")
        assert metadata.partition == default_partition(b"cat-03", 3)
        assert str(metadata.task) == f"1_{metadata.partition}"
        assert metadata.active_slot == metadata.partition % 2
        assert metadata.standby_slots == ()
    app.raise_if_failed()
