"""Versioned key-value store conformance (KIP-889 semantics) on every backend."""

from __future__ import annotations

import random

import pytest

from fluvial import serdes
from fluvial.state import (
    PUT_RETURN_CODE_NOT_PUT,
    PUT_RETURN_CODE_VALID_TO_UNDEFINED,
    ChangelogRecord,
    TypedVersionedKeyValueStore,
    VersionedRecord,
)


def test_return_codes_match_kafka_streams():
    assert PUT_RETURN_CODE_VALID_TO_UNDEFINED == -1
    assert PUT_RETURN_CODE_NOT_PUT == -(2**63)


def test_latest_and_as_of_lookups(make_versioned):
    store = make_versioned(history_retention_ms=10_000)
    assert store.put(b"k", b"v1", 100) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.put(b"k", b"v2", 200) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.put(b"k", b"v3", 300) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.get(b"k") == VersionedRecord(b"v3", 300, None)
    assert store.get(b"k", 99) is None
    assert store.get(b"k", 100) == VersionedRecord(b"v1", 100, 200)
    assert store.get(b"k", 199) == VersionedRecord(b"v1", 100, 200)
    assert store.get(b"k", 200) == VersionedRecord(b"v2", 200, 300)
    assert store.get(b"k", 10_000) == VersionedRecord(b"v3", 300, None)
    assert store.get(b"missing") is None
    assert store.get(b"missing", 150) is None


def test_out_of_order_puts_insert_into_history(make_versioned):
    store = make_versioned(history_retention_ms=10_000)
    store.put(b"k", b"v100", 100)
    store.put(b"k", b"v300", 300)
    # Between two versions: valid until the next one.
    assert store.put(b"k", b"v200", 200) == 300
    # Before every version: valid until the first one.
    assert store.put(b"k", b"v50", 50) == 100
    assert store.get(b"k") == VersionedRecord(b"v300", 300, None)
    assert store.get(b"k", 60) == VersionedRecord(b"v50", 50, 100)
    assert store.get(b"k", 250) == VersionedRecord(b"v200", 200, 300)
    assert store.get(b"k", 150) == VersionedRecord(b"v100", 100, 200), "validTo shrank"
    # Same timestamp: replaces that version, keeps its validity.
    assert store.put(b"k", b"v200b", 200) == 300
    assert store.get(b"k", 200) == VersionedRecord(b"v200b", 200, 300)
    assert store.put(b"k", b"v300b", 300) == PUT_RETURN_CODE_VALID_TO_UNDEFINED
    assert store.get(b"k") == VersionedRecord(b"v300b", 300, None)


def test_tombstones_are_versions(make_versioned):
    store = make_versioned(history_retention_ms=10_000)
    store.put(b"k", b"a", 100)
    assert store.delete(b"k", 200) == VersionedRecord(b"a", 100, None)
    assert store.get(b"k") is None
    assert store.get(b"k", 150) == VersionedRecord(b"a", 100, 200)
    assert store.get(b"k", 250) is None
    store.put(b"k", b"b", 300)
    assert store.get(b"k", 250) is None
    assert store.get(b"k", 300) == VersionedRecord(b"b", 300, None)
    # A tombstone put out of order cuts the history it lands in.
    assert store.put(b"k", None, 120) == 200
    assert store.get(b"k", 110) == VersionedRecord(b"a", 100, 120)
    assert store.get(b"k", 130) is None
    # A tombstone on an unknown key still bounds versions put before it later.
    assert store.delete(b"new", 500) is None
    assert store.put(b"new", b"x", 400) == 500
    assert store.get(b"new", 450) == VersionedRecord(b"x", 400, 500)


def test_history_retention(make_versioned, attach_changelog):
    store = make_versioned(history_retention_ms=1000)
    log = attach_changelog(store)
    store.put(b"k", b"v0", 0)
    store.put(b"k", b"v500", 500)
    store.put(b"old", b"only", 100)
    store.put(b"k", b"v2000", 2000)  # cutoff = 1000
    assert store.history_cutoff() == 1000
    # As of a time older than the cutoff: only the latest version may answer.
    assert store.get(b"k", 999) is None
    assert store.get(b"k", 600) is None
    assert store.get(b"old", 500) == VersionedRecord(b"only", 100, None), "latest never expires"
    assert store.get(b"old") == VersionedRecord(b"only", 100, None)
    assert store.get(b"k", 1000) == VersionedRecord(b"v500", 500, 2000)
    # Puts older than the cutoff are refused and not logged.
    assert store.put(b"k", b"late", 999) == PUT_RETURN_CODE_NOT_PUT
    assert store.put(b"k", b"ok", 1000) == 2000
    assert [r.timestamp_ms for r in log] == [0, 500, 100, 2000, 1000]


def test_reclaimed_history_does_not_change_answers(make_versioned):
    store = make_versioned(history_retention_ms=100)
    store.put(b"k", b"a", 0)
    store.put(b"k", b"b", 50)
    store.delete(b"gone", 10)
    store.put(b"k", b"c", 1000)  # everything before 900 is out of retention
    store.put(b"z", b"d", 2000)
    assert store.get(b"k") == VersionedRecord(b"c", 1000, None)
    assert store.get(b"k", 1950) == VersionedRecord(b"c", 1000, None)
    assert store.get(b"gone") is None
    store.flush()
    # b"k": only its latest survives; b"gone": its lonely old tombstone is reclaimed.
    assert store.approximate_num_entries() <= 3


def test_changelog_carries_plain_values_and_rebuilds_the_store(make_versioned, attach_changelog):
    original = make_versioned(history_retention_ms=500, name="original")
    log = attach_changelog(original)
    rng = random.Random(7)
    for i in range(200):
        key = f"k{rng.randrange(5)}".encode()
        ts = max(0, i * 10 - rng.randrange(600))
        value = None if rng.random() < 0.15 else f"v{i}".encode()
        original.put(key, value, ts)
    assert log[0] == ChangelogRecord(log[0].key, log[0].value, log[0].timestamp_ms)
    assert all(r.value is None or r.value.startswith(b"v") for r in log), "no framing bytes"

    rebuilt = make_versioned(history_retention_ms=500, name="rebuilt")
    echoed = attach_changelog(rebuilt)
    rebuilt.restore(log)
    assert echoed == []
    assert rebuilt.observed_stream_time == original.observed_stream_time
    for k in range(5):
        key = f"k{k}".encode()
        assert rebuilt.get(key) == original.get(key)
        for as_of in range(0, 2100, 7):
            assert rebuilt.get(key, as_of) == original.get(key, as_of), (key, as_of)


def test_matches_a_brute_force_model(make_versioned):
    """Random puts, checked against an oracle that keeps every version forever."""
    retention = 300
    store = make_versioned(history_retention_ms=retention)
    rng = random.Random(11)
    model: dict[bytes, dict[int, bytes | None]] = {}
    stream_time = -1
    for i in range(400):
        key = f"k{rng.randrange(4)}".encode()
        ts = max(0, i * 5 - rng.randrange(400))
        value = None if rng.random() < 0.2 else f"v{i}".encode()
        result = store.put(key, value, ts)
        if stream_time >= 0 and ts < stream_time - retention:
            assert result == PUT_RETURN_CODE_NOT_PUT
            continue
        stream_time = max(stream_time, ts)
        model.setdefault(key, {})[ts] = value
        newer = [t for t in model[key] if t > ts]
        assert result == (min(newer) if newer else PUT_RETURN_CODE_VALID_TO_UNDEFINED)
    cutoff = stream_time - retention
    for key, versions in model.items():
        times = sorted(versions)
        for as_of in range(cutoff, stream_time + 10):
            older = [t for t in times if t <= as_of]
            if not older or versions[older[-1]] is None:
                expected = None
            else:
                later = [t for t in times if t > older[-1]]
                expected = VersionedRecord(versions[older[-1]], older[-1], min(later, default=None))
            assert store.get(key, as_of) == expected, (key, as_of)


def test_negative_timestamps_are_refused(make_versioned):
    with pytest.raises(ValueError, match=">= 0"):
        make_versioned().put(b"k", b"v", -1)


def test_keys_that_extend_the_key_do_not_leak(make_versioned):
    store = make_versioned(history_retention_ms=10_000)
    store.put(b"a", b"short", 100)
    store.put(b"a\x00", b"longer", 50)
    store.put(b"a" + b"\x00" * 8, b"sneaky", 200)
    assert store.get(b"a", 150) == VersionedRecord(b"short", 100, None)
    assert store.get(b"a\x00", 300) == VersionedRecord(b"longer", 50, None)
    assert store.get(b"a", 99) is None


@pytest.mark.usefixtures("requires_persistence")
def test_history_stream_time_and_offset_survive_reopen(make_versioned):
    store = make_versioned(history_retention_ms=1000, name="durable")
    store.put(b"k", b"a", 100)
    store.put(b"k", b"b", 900)
    store.committed_offset = 3
    store.close()
    reopened = make_versioned(history_retention_ms=1000, name="durable")
    assert reopened.get(b"k", 500) == VersionedRecord(b"a", 100, 900)
    assert reopened.observed_stream_time == 900
    assert reopened.committed_offset == 3
    reopened.put(b"k", b"c", 5000)
    assert reopened.put(b"k", b"late", 3000) == PUT_RETURN_CODE_NOT_PUT


def test_typed_versioned_store(make_versioned):
    store = TypedVersionedKeyValueStore(
        make_versioned(history_retention_ms=10_000), serdes.string(), serdes.long()
    )
    store.put("a", 1, 10)
    store.put("a", 2, 20)
    assert store.get("a") == VersionedRecord(2, 20, None)
    assert store.get("a", 15) == VersionedRecord(1, 10, 20)
    assert store.delete("a", 30) == VersionedRecord(2, 20, None)
    assert store.get("a") is None
