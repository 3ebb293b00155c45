"""Checkpoint files: the changelog offsets a task's stores reflect, written atomically.

Persistent stores keep their offset inside RocksDB, next to their data. In-memory stores have no
such place, yet a task that closes cleanly and reopens in the same process (or a runtime that
wants one file to look at per task) needs the offsets somewhere: Kafka Streams writes a
``.checkpoint`` file per task directory for this.

The format follows Kafka Streams' offset checkpoint file: a version line (``0``), a count line,
then one ``<name> <offset>`` line per entry. A name is anything without line breaks and without
surrounding blanks: a store name, or ``"<topic> <partition>"``, which makes a file of this format
read Kafka Streams' own checkpoint files (their lines are ``topic partition offset``).

A write goes to a temporary file in the same directory, is fsynced, renamed over the old file and
the directory fsynced: a crash leaves either the old checkpoint or the new one, never a torn one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

from fluvial.errors import StreamsError

#: Kafka Streams' task checkpoint file name.
CHECKPOINT_FILE_NAME = ".checkpoint"
CHECKPOINT_VERSION = 0


class CheckpointError(StreamsError):
    """A checkpoint file exists but cannot be read."""


def read_checkpoint(path: str | os.PathLike[str]) -> dict[str, int]:
    """The offsets recorded in ``path``; ``{}`` when the file does not exist."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    lines = text.splitlines()

    def bad(reason: str) -> CheckpointError:
        return CheckpointError(
            f"checkpoint file {path} is corrupt ({reason}); delete it to restore the task's "
            "stores from their changelogs"
        )

    if len(lines) < 2:
        raise bad("missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise bad(f"unsupported version {lines[0].strip()!r}, expected {CHECKPOINT_VERSION}")
    try:
        count = int(lines[1])
    except ValueError:
        raise bad(f"count line {lines[1]!r} is not a number") from None
    entries = [line for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise bad(f"{len(entries)} entries, but the count line says {count}")
    offsets: dict[str, int] = {}
    for line in entries:
        name, _, offset = line.rpartition(" ")
        try:
            offsets[name.strip()] = int(offset)
        except ValueError:
            raise bad(f"entry {line!r} does not end with an offset") from None
        if not name.strip():
            raise bad(f"entry {line!r} has no name")
    return offsets


def write_checkpoint(path: str | os.PathLike[str], offsets: Mapping[str, int]) -> None:
    """Replace ``path`` with ``offsets`` atomically (an empty mapping writes an empty file)."""
    path = Path(path)
    lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
    for name, offset in sorted(offsets.items()):
        if not name or name != name.strip() or "\n" in name or "\r" in name:
            raise ValueError(
                f"checkpoint name {name!r} is invalid: use a non-empty name without line "
                "breaks or surrounding blanks"
            )
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise ValueError(f"checkpoint offset of {name!r} must be an int, got {offset!r}")
        lines.append(f"{name} {offset}")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def delete_checkpoint(path: str | os.PathLike[str]) -> None:
    """Remove ``path`` durably, if it exists.

    Under exactly-once without transactional stores, a task deletes its checkpoint when it
    starts processing, so that a crash forces a full restore instead of trusting stale offsets.
    """
    path = Path(path)
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename (or unlink) itself is only durable once the directory entry is.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
