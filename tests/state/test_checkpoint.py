"""Checkpoint files: round trips, Kafka Streams' format, corruption and atomic replacement."""

from __future__ import annotations

import pytest

from fluvial.state import (
    CHECKPOINT_FILE_NAME,
    CheckpointError,
    delete_checkpoint,
    read_checkpoint,
    write_checkpoint,
)


def test_round_trip_and_overwrite(tmp_path):
    path = tmp_path / "task-0_1" / CHECKPOINT_FILE_NAME
    write_checkpoint(path, {"counts": 41, "app-totals-changelog 1": 7})
    assert read_checkpoint(path) == {"counts": 41, "app-totals-changelog 1": 7}
    write_checkpoint(path, {"counts": 42})
    assert read_checkpoint(path) == {"counts": 42}
    write_checkpoint(path, {})
    assert read_checkpoint(path) == {}
    assert sorted(p.name for p in path.parent.iterdir()) == [CHECKPOINT_FILE_NAME], "no temp files"


def test_file_layout_is_kafka_streams_offset_checkpoint(tmp_path):
    path = tmp_path / ".checkpoint"
    write_checkpoint(path, {"b-changelog 0": 5, "a-changelog 2": -4})
    assert path.read_text() == "0\n2\na-changelog 2 -4\nb-changelog 0 5\n"
    # A file written by Kafka Streams reads back with "topic partition" names.
    path.write_text("0\n1\nwordcount-counts-changelog 3 1234\n")
    assert read_checkpoint(path) == {"wordcount-counts-changelog 3": 1234}


def test_missing_file_reads_empty_and_delete_is_idempotent(tmp_path):
    path = tmp_path / ".checkpoint"
    assert read_checkpoint(path) == {}
    write_checkpoint(path, {"s": 1})
    delete_checkpoint(path)
    delete_checkpoint(path)
    assert not path.exists()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "missing version"),
        ("1\n0\n", "unsupported version"),
        ("0\nx\n", "not a number"),
        ("0\n2\ns 1\n", "count line says 2"),
        ("0\n1\ns one\n", "does not end with an offset"),
        ("0\n1\n 5\n", "has no name"),
    ],
)
def test_corrupt_files_are_reported(tmp_path, content, reason):
    path = tmp_path / ".checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError, match=reason):
        read_checkpoint(path)


@pytest.mark.parametrize("name", ["", " padded", "two\nlines"])
def test_invalid_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="invalid"):
        write_checkpoint(tmp_path / ".checkpoint", {name: 1})
    assert not (tmp_path / ".checkpoint").exists()
