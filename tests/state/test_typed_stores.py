"""Typed facades: objects over bytes stores."""

from __future__ import annotations

import pytest

from fluvial import serdes
from fluvial.errors import SerializationError
from fluvial.records import Window, Windowed
from fluvial.state import (
    ReadOnlyKeyValueStore,
    TimestampedKeyValueStore,
    TypedKeyValueStore,
    TypedTimestampedKeyValueStore,
    TypedWindowStore,
    ValueAndTimestamp,
)


def test_typed_key_value_store_round_trips_objects(make_kv, attach_changelog):
    inner = make_kv()
    log = attach_changelog(inner)
    store = TypedKeyValueStore(inner, serdes.string(), serdes.long())
    store.put("a", 1, timestamp_ms=5)
    store.put("b", -2)
    assert store.get("a") == 1
    assert store.get("zzz") is None
    assert list(store.all()) == [("a", 1), ("b", -2)]
    assert list(store.range("b", None)) == [("b", -2)]
    assert store.put_if_absent("a", 9) == 1
    assert store.delete("a") == 1
    assert inner.get(b"b") == b"\xff" * 7 + b"\xfe", "the bytes are the serde's bytes"
    assert log[0].key == b"a" and log[0].value == b"\x00" * 7 + b"\x01"


def test_typed_store_rejects_values_its_serde_cannot_write(make_kv):
    store = TypedKeyValueStore(make_kv(), serdes.string(), serdes.long(), topic="app-kv-changelog")
    with pytest.raises(SerializationError, match="long serde on topic 'app-kv-changelog'"):
        store.put("a", "not a number")
    with pytest.raises(ValueError, match="None keys"):
        store.put(None, 1)


def test_typed_timestamped_store_returns_value_and_timestamp(make_kv):
    store = TypedTimestampedKeyValueStore(
        TimestampedKeyValueStore(make_kv()), serdes.string(), serdes.json()
    )
    store.put("a", {"n": 1}, 100)
    assert store.get("a") == ValueAndTimestamp({"n": 1}, 100)
    assert store.get("a").timestamp_ms == 100
    assert list(store.all()) == [("a", ValueAndTimestamp({"n": 1}, 100))]
    assert store.delete("a") == ValueAndTimestamp({"n": 1}, 100)
    assert store.get("a") is None


def test_read_only_view_hides_timestamps(make_kv):
    timestamped = TimestampedKeyValueStore(make_kv())
    TypedTimestampedKeyValueStore(timestamped, serdes.string(), serdes.long()).put("a", 7, 70)
    view = ReadOnlyKeyValueStore(timestamped, serdes.string(), serdes.long())
    assert view.get("a") == 7
    assert view["a"] == 7
    assert "a" in view and "b" not in view
    assert view.get_with_timestamp("a") == ValueAndTimestamp(7, 70)
    assert view.to_dict() == {"a": 7}
    with pytest.raises(KeyError):
        view["b"]
    assert not hasattr(view, "put")


def test_read_only_view_over_a_plain_store(make_kv):
    inner = make_kv()
    TypedKeyValueStore(inner, serdes.string(), serdes.string()).put("k", "v")
    view = ReadOnlyKeyValueStore(inner, serdes.string(), serdes.string())
    assert list(view.all()) == [("k", "v")]
    with pytest.raises(TypeError, match="not timestamped"):
        view.get_with_timestamp("k")


def test_typed_window_store_gives_windowed_keys(make_window):
    store = TypedWindowStore(
        make_window(retention_ms=10_000, window_size_ms=100), serdes.string(), serdes.long()
    )
    store.put("k", 1, 0)
    store.put("k", 2, 100)
    store.put("j", 3, 100)
    assert store.fetch("k", 100) == 2
    assert list(store.fetch_range("k", 0, 100)) == [(0, 1), (100, 2)]
    assert list(store.fetch_all(100, 100)) == [
        (Windowed("j", Window(100, 200)), 3),
        (Windowed("k", Window(100, 200)), 2),
    ]
    assert [w for w, _ in store.all()][0] == Windowed("k", Window(0, 100))
