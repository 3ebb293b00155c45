"""``Window``: the value every windowed result's key carries. Users hash, sort, compare and print
windows, and a window must not change under a store key."""

from __future__ import annotations

import pytest

from fluvial.records import Record, Window, Windowed


def test_a_window_is_equal_hashed_and_ordered_by_its_bounds() -> None:
    a, b, c = Window(0, 5000), Window(0, 5000), Window(0, 6000)
    assert a == b and hash(a) == hash(b) and a != c
    assert hash(a) == hash((0, 5000))
    assert sorted([Window(5000, 10000), c, a]) == [a, c, Window(5000, 10000)]
    assert a < c <= c and Window(5000, 10000) > c >= a
    assert {a: 1}[b] == 1
    assert Windowed("k", a) == Windowed("k", b) and hash(Windowed("k", a)) == hash(Windowed("k", b))
    assert a != (0, 5000)
    with pytest.raises(TypeError):
        _ = a < (0, 5000)


def test_a_window_cannot_be_changed_or_built_backwards() -> None:
    window = Window(1000, 2000)
    with pytest.raises(AttributeError):
        window.start_ms = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        window.end_ms = 0  # type: ignore[misc]
    assert (window.start_ms, window.end_ms) == (1000, 2000)
    with pytest.raises(ValueError, match="window end 1 is before its start 2"):
        Window(2, 1)


def test_a_window_prints_its_bounds() -> None:
    assert repr(Window(0, 5000)) == "Window(start_ms=0, end_ms=5000)"
    assert str(Windowed("alice", Window(0, 5000))) == "[alice@0/5000]"


def test_records_windows_and_changes_survive_pickling():
    """Users hand records to pickle (multiprocessing, Spark's Python workers); the compiled
    classes must come back equal, as the interpreted ones do."""
    import pickle

    from fluvial.dsl.change import Change

    window = Window(1_000, 2_000)
    values = [
        window,
        Windowed("k", window),
        Record("k", {"v": 1}, 5, [("h", b"x")], "topic", 2, 40),
        Change({"n": 1}, None),
    ]
    for value in values:
        copy = pickle.loads(pickle.dumps(value))
        assert type(copy) is type(value) and copy == value, value
