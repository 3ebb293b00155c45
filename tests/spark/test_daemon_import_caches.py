"""The Spark worker daemon's import-cache reset: PySpark resets the import caches at the start
of every task (every lease); a zip on the path is read again only when it changed."""

from __future__ import annotations

import importlib
import sys
import zipfile
import zipimport

import pytest

from fluvial.spark import daemon


def _write_zip(path, modules):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("zpkg/__init__.py", "")
        for name, text in modules.items():
            archive.writestr(f"zpkg/{name}.py", text)


@pytest.fixture
def zip_on_path(tmp_path, monkeypatch):
    path = tmp_path / "lib.zip"
    _write_zip(path, {"first": "VALUE = 1\n"})
    monkeypatch.syspath_prepend(str(path))
    # The patch is global: undo it (and forget the package) when the test ends.
    monkeypatch.setattr(
        zipimport.zipimporter, "invalidate_caches", zipimport.zipimporter.invalidate_caches
    )
    yield path
    for name in [n for n in sys.modules if n == "zpkg" or n.startswith("zpkg.")]:
        del sys.modules[name]


def test_an_unchanged_zip_is_not_read_again_and_a_changed_one_is(zip_on_path, monkeypatch):
    import zpkg.first  # noqa: F401 - an importer for the archive and one for its package

    reads = []
    read_directory = zipimport._read_directory
    monkeypatch.setattr(
        zipimport,
        "_read_directory",
        lambda archive: reads.append(archive) or read_directory(archive),
    )
    importlib.invalidate_caches()
    per_reset = len(reads)
    assert per_reset >= 2, "without the patch every importer of the archive reads it again"

    daemon.reread_zip_directories_only_when_changed()
    daemon.reread_zip_directories_only_when_changed()  # applied once however often it is called
    reads.clear()
    importlib.invalidate_caches()
    assert len(reads) <= 1, "at most one read, which records the archive's stamp"
    reads.clear()
    for _ in range(5):
        importlib.invalidate_caches()
    assert reads == [], "an unchanged archive: its directory comes from the cache"

    # A changed archive (new content, new size) is read again, and what it adds imports.
    _write_zip(zip_on_path, {"first": "VALUE = 1\n", "second": "VALUE = 2\n"})
    importlib.invalidate_caches()
    assert reads and all(r == str(zip_on_path) for r in reads)
    second = importlib.import_module("zpkg.second")
    assert second.VALUE == 2
