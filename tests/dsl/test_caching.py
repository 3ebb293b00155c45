"""Record caching: fewer revisions between commits, never different final values."""

from __future__ import annotations

import pytest

from fluvial import Materialized, StreamsBuilder, StreamsConfig, TimeWindows, serdes
from fluvial.testing import TopologyTestDriver

RECORDS = [(k, "v", ts) for ts, k in enumerate("aabacbbbaacd", start=1)]


def counts(caching: bool, windowed: bool):
    builder = StreamsBuilder()
    m = Materialized.as_("counts")
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    grouped = builder.stream(
        "in", key_serde=serdes.string(), value_serde=serdes.string()
    ).group_by_key()
    if windowed:
        table = grouped.windowed_by(TimeWindows.of_size_with_no_grace(5)).count(materialized=m)
        table.to_stream().map(lambda k, v: (f"{k.key}@{k.window.start_ms}", v)).to(
            "out", key_serde=serdes.string(), value_serde=serdes.long()
        )
    else:
        table = grouped.count(materialized=m)
        table.to_stream().to("out", value_serde=serdes.long())
    return builder.build()


def drive(topology, store: str, store_type: str, commit_every: int, records=RECORDS):  # noqa: ANN001, ANN201
    """Pipe ``records`` (string keys and values) to "in", committing every ``commit_every``;
    return what "out" got (string keys, long values) and the changelog of ``store``."""
    config = StreamsConfig(application_id=store, cache_max_bytes=1 << 20)
    with TopologyTestDriver(topology, config, store_type=store_type, auto_commit=False) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.long())
        for i, (key, value, ts) in enumerate(records, start=1):
            inp.pipe_input(key, value, timestamp_ms=ts)
            if i % commit_every == 0:
                driver.commit()
        driver.commit()
        return out.read_key_values(), driver.changelog(store)


def run(caching: bool, windowed: bool, store_type: str, commit_every: int):
    return drive(counts(caching, windowed), "counts", store_type, commit_every)


@pytest.mark.parametrize("windowed", [False, True], ids=["keyed", "windowed"])
def test_caching_coalesces_revisions_but_not_final_values(windowed, store_type):
    uncached, uncached_log = run(False, windowed, store_type, commit_every=4)
    cached, cached_log = run(True, windowed, store_type, commit_every=4)
    assert len(uncached) == len(RECORDS)
    assert len(cached) < len(uncached)
    assert dict(cached) == dict(uncached)
    if store_type == "in_memory":
        assert len(cached_log) < len(uncached_log), "the changelog is coalesced too"
    else:
        # A persistent store's changelog holds each key's last write per commit, cache or not
        # (a cache may still drop a window that expired before its flush).
        assert len(cached_log) <= len(uncached_log) < len(RECORDS)


def test_cache_of_zero_bytes_turns_caching_off():
    config = StreamsConfig(application_id="nocache", cache_max_bytes=0)
    with TopologyTestDriver(counts(True, False), config, auto_commit=False) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.long())
        inp.pipe_input("a", "v", timestamp_ms=1)
        inp.pipe_input("a", "v", timestamp_ms=2)
        assert out.read_key_values() == [("a", 1), ("a", 2)]


def test_cached_revisions_appear_only_at_commit():
    with TopologyTestDriver(counts(True, False), auto_commit=False) as driver:
        inp = driver.create_input_topic("in", serdes.string(), serdes.string())
        out = driver.create_output_topic("out", serdes.string(), serdes.long())
        inp.pipe_input("a", "v", timestamp_ms=1)
        inp.pipe_input("a", "v", timestamp_ms=2)
        assert out.is_empty()
        assert driver.get_key_value_store("counts").get("a") == 2, "reads see the cache"
        driver.commit()
        assert out.read_key_values() == [("a", 2)]


def close_counts(caching: bool, store_type: str):
    """Counts in 5 ms windows emitted on close, committed every 3 records."""
    from fluvial import EmitStrategy

    builder = StreamsBuilder()
    m = Materialized.as_("closing")
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    (
        builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(5, 2))
        .emit_strategy(EmitStrategy.on_window_close())
        .count(materialized=m)
        .to_stream()
        .map(lambda k, v: (f"{k.key}@{k.window.start_ms}", v))
        .to("out", key_serde=serdes.string(), value_serde=serdes.long())
    )
    return drive(builder.build(), "closing", store_type, 3, RECORDS + [("z", "v", 30)])


def test_emit_on_close_with_a_cache_emits_the_same_results_and_folds_the_changelog(store_type):
    uncached, uncached_log = close_counts(False, store_type)
    cached, cached_log = close_counts(True, store_type)
    # One final count per window, in the same order, whether or not the cache folds updates.
    assert cached == uncached
    assert cached == [("a@0", 3), ("b@0", 1), ("a@5", 1), ("b@5", 3), ("c@5", 1), ("a@10", 1),
                      ("c@10", 1), ("d@10", 1)]  # fmt: skip
    if store_type == "in_memory":
        assert len(cached_log) < len(uncached_log), "the changelog is folded per commit"
    else:  # a persistent store folds it per commit with or without the cache
        assert len(cached_log) <= len(uncached_log) < len(RECORDS) + 1


def session_counts(caching: bool, store_type: str):
    """Session counts (gap 3 ms) committed every 4 records: the revisions and the changelog."""
    from fluvial import SessionWindows

    builder = StreamsBuilder()
    m = Materialized.as_("sessions")
    m = m.with_caching_enabled() if caching else m.with_caching_disabled()
    (
        builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string())
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(3))
        .count(materialized=m)
        .to_stream()
        .map(lambda k, v: (f"{k.key}@{k.window.start_ms}-{k.window.end_ms}", v))
        .to("out", key_serde=serdes.string(), value_serde=serdes.long())
    )
    return drive(builder.build(), "sessions", store_type, 4)


def test_session_caching_folds_merges_but_not_final_sessions(store_type):
    uncached, uncached_log = session_counts(False, store_type)
    cached, cached_log = session_counts(True, store_type)

    def final(revisions):  # the live sessions at the end: latest value per session, no tombstone
        latest = dict(revisions)
        return {k: v for k, v in latest.items() if v is not None}

    assert final(cached) == final(uncached)
    assert final(cached) == {"a@1-4": 3, "a@9-10": 2, "b@3-8": 4, "c@5-5": 1, "c@11-11": 1,
                             "d@12-12": 1}  # fmt: skip
    assert len(cached) < len(uncached), "a session merged away before a commit is never sent"
    assert len(cached_log) < len(uncached_log), "the changelog is folded too"
