"""Class-data-sharing archives: a JVM that maps the classes an earlier run of it loaded starts in
about half the CPU time.

A JVM started with ``-XX:ArchiveClassesAtExit=FILE`` writes, as it exits, every class it
loaded (parsed, verified, laid out) into FILE. A later JVM started with
``-XX:SharedArchiveFile=FILE`` maps them instead of loading them again. An archive holds for one
Java build and one class path only, and a partly written one crashes the JVM that maps it. So:

- an archive is named by a key (:func:`archive_key`) over the Java build and every jar on its
  class path (path, size, time): another Java or another jar set looks for another file, and a
  missing archive is never an error (a debug line says so and the JVM starts without it);
- it is written under a temporary name, checked by a JVM that must map it
  (``-Xshare:on``), and only then renamed into place: the final name is always a whole archive.

Archives are made at set-up (``python -m fluvial.jvm``), never while an application starts.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from fluvial import children
from fluvial.jvm import cache_dir, java_version

log = logging.getLogger(__name__)

#: The JVM's own notes about an archive it cannot use stay off the user's terminal: fluvial
#: decides by the key before it passes the option, and a JVM that cannot use it starts without.
QUIET = ("-Xlog:cds=off", "-Xlog:cds+dynamic=off")
CHECK_TIMEOUT_S = 120.0


def archive_dir() -> Path:
    return cache_dir() / "cds"


def archive_key(java: str, jars: Iterable[Path], *, extra: str = "") -> str:
    """A digest of what an archive holds for: this Java build (its version line and its JVM
    library and base archive files) and each jar (path, size, modification time)."""
    digest = hashlib.sha256()
    home = Path(os.path.realpath(java)).parent.parent
    digest.update(f"{home}\0{java_version(java)}\0{extra}\0".encode())
    jvm_files = sorted((home / "lib" / "server").glob("*")) if (home / "lib").is_dir() else []
    for path in [*jvm_files, *jars]:
        with contextlib.suppress(OSError):
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def archive_path(name: str, key: str) -> Path:
    """Where the archive ``name`` made for ``key`` lives (whether or not it exists)."""
    return archive_dir() / f"{name}-{key}.jsa"


def find_archive(name: str, key: str) -> Path | None:
    """The whole archive ``name`` for ``key``, or None (with a debug line saying why)."""
    path = archive_path(name, key)
    if path.is_file():
        return path
    others = [p.name for p in archive_dir().glob(f"{name}-*.jsa")]
    log.debug(
        "no class-data archive %s%s; the JVM starts without it (python -m fluvial.jvm makes it)",
        path,
        f" ({', '.join(others)} is for another Java or jar set)" if others else "",
    )
    return None


def use_options(archive: Path) -> list[str]:
    """The JVM options that map ``archive``."""
    return [f"-XX:SharedArchiveFile={archive}", *QUIET]


def make_archive(
    name: str,
    key: str,
    java: str,
    dump: Callable[[Path], str],
) -> Path:
    """Make the archive ``name`` for ``key`` unless it exists, and return its path.

    ``dump(temporary_path)`` runs the JVM with ``-XX:ArchiveClassesAtExit=temporary_path``
    until it has exited and returns the class path it ran with. The archive is renamed into
    place only after a JVM with that class path has mapped it; older archives of ``name`` are
    removed then. Raises on any failure, leaving no archive behind (callers decide whether
    that matters: at set-up it does not).
    """
    final = archive_path(name, key)
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two set-ups at once make it once
        if final.is_file():
            return final
        temporary = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        try:
            class_path = dump(temporary)
            if not temporary.is_file() or temporary.stat().st_size == 0:
                raise RuntimeError("the JVM exited without writing its class-data archive")
            check_archive(java, temporary, class_path)
            os.replace(temporary, final)
        finally:
            temporary.unlink(missing_ok=True)
        for old in final.parent.glob(f"{name}-*.jsa"):
            if old != final:
                old.unlink(missing_ok=True)
    return final


def check_archive(java: str, archive: Path, class_path: str) -> None:
    """Raise unless a JVM with ``class_path`` maps ``archive`` (``-Xshare:on`` makes any
    archive it cannot use an error: a truncated one, another Java's, another class path's)."""
    result = children.run(
        [
            java,
            "-Xshare:on",
            f"-XX:SharedArchiveFile={archive}",
            "-XX:ErrorFile=/dev/null",
            "-cp",
            class_path,
            "-version",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=CHECK_TIMEOUT_S,
        cwd=archive.parent,  # where the dump ran: a relative class path entry means the same
    )
    if result.returncode != 0:
        said = (result.stdout + result.stderr).strip().splitlines()
        raise RuntimeError(
            f"the class-data archive just written does not map (exit code {result.returncode}): "
            + " | ".join(said[:3])
        )
