"""PySpark's Python worker daemon, with fluvial imported before it forks any worker.

Spark starts one daemon per executor and forks a Python worker from it for each task slot
(``spark.python.daemon.module``). A worker forked from this one starts with fluvial, the
Kafka client and the state stores imported already, so the first lease of a run does not
wait for every worker to import them.

It also makes the import-cache reset that PySpark runs at the start of every task cheap (see
:func:`reread_zip_directories_only_when_changed`): each lease is a task, so the reset ran once
per slot per lease.
"""

from __future__ import annotations

import os
import zipimport
from collections.abc import Callable

#: Per zip archive on the path: (mtime_ns, size) when its directory was last read.
_read_at: dict[str, tuple[int, int]] = {}


def reread_zip_directories_only_when_changed() -> None:
    """Make ``zipimporter.invalidate_caches`` re-read an archive only when it changed.

    PySpark calls ``importlib.invalidate_caches()`` as each task starts. Under Python 3.11 that
    makes every zip importer in ``sys.path_importer_cache`` parse its archive's whole
    directory again, and there is one importer per package imported from a zip (``pyspark.zip``
    and its many subpackages among them): about a second of CPU per task in a worker that ran
    a fluvial lease, measured with py-spy. After this, an importer whose archive has the same
    modification time and size as when its directory was last read takes that directory from
    the shared cache; a changed, new or unreadable archive is read again as before.
    """
    original: Callable[[zipimport.zipimporter], None] = zipimport.zipimporter.invalidate_caches
    if getattr(original, "_fluvial", False):
        return

    def invalidate_caches(self: zipimport.zipimporter) -> None:
        archive = self.archive
        try:
            stat = os.stat(archive)
        except OSError:
            original(self)
            return
        stamp = (stat.st_mtime_ns, stat.st_size)
        files = zipimport._zip_directory_cache.get(archive)  # type: ignore[attr-defined]
        if files is not None and _read_at.get(archive) == stamp:
            self._files = files  # type: ignore[attr-defined]
            return
        original(self)
        _read_at[archive] = stamp

    invalidate_caches._fluvial = True  # type: ignore[attr-defined]
    zipimport.zipimporter.invalidate_caches = invalidate_caches  # type: ignore[method-assign]


if __name__ == "__main__":
    from pyspark.daemon import manager

    import fluvial.spark.slots  # noqa: F401 - imported here, before the fork, for every worker

    reread_zip_directories_only_when_changed()
    manager()
