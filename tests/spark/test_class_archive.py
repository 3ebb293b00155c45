"""Spark's driver JVM maps the class-data archive set-up made: made whole or not at all, used
only for the Java build and jars it was made for, and a partly written file is never mapped."""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

import pytest

from fluvial import children
from fluvial.jvm import cache_dir, java_executable
from fluvial.jvm_archive import archive_key, check_archive, find_archive, make_archive
from fluvial.spark.class_archive import (
    archive_name,
    driver_key,
    driver_options,
    make_driver_archive,
)

pytestmark = [pytest.mark.spark]

# A session in a process of its own (a test process may hold another SparkContext): the
# archives its driver JVM maps, and the options it was started with.
SESSION = """
import json
from fluvial.spark.session import local_spark_session
spark = local_spark_session("local[1]")
pid = spark.sparkContext._gateway.proc.pid
with open(f"/proc/{pid}/maps") as maps:
    mapped = sorted({line.split()[-1] for line in maps if line.rstrip().endswith(".jsa")})
with open(f"/proc/{pid}/cmdline") as cmdline:
    options = cmdline.read().split("\\0")
print("SESSION " + json.dumps({"mapped": mapped, "options": options}), flush=True)
spark.stop()
"""


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache of this test's own for archives, sharing the resolved jars (no Maven run)."""
    (tmp_path / "jars").symlink_to(cache_dir() / "jars", target_is_directory=True)
    monkeypatch.setenv("FLUVIAL_CACHE_DIR", str(tmp_path))
    return tmp_path


def start_session() -> dict[str, list[str]]:
    result = children.run([sys.executable, "-c", SESSION], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    [line] = [x for x in result.stdout.splitlines() if x.startswith("SESSION ")]
    return json.loads(line.removeprefix("SESSION "))


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_setup_renames_a_whole_archive_into_place_and_sessions_map_it(own_cache: Path) -> None:
    java = java_executable()
    final = own_cache / "cds" / f"{archive_name()}-{driver_key(java)}.jsa"
    # While set-up makes it, the archive is written under another name: the final name, each
    # time it is seen, already has the whole archive's size.
    seen_final: list[int] = []
    seen_temporary: list[str] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for path in (own_cache / "cds").glob("*.jsa*"):
                try:
                    size = path.stat().st_size
                except FileNotFoundError:
                    continue
                (seen_final.append(size) if path == final else seen_temporary.append(path.name))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    said: list[str] = []
    try:
        made = make_driver_archive(say=said.append)
    finally:
        done.set()
        watcher.join(10)

    assert made == final, said
    size = final.stat().st_size
    assert seen_temporary and all(name.startswith(f".{final.name}.tmp-") for name in seen_temporary)
    assert all(seen == size for seen in seen_final)
    assert sorted(p.name for p in final.parent.glob("*.jsa*")) == [final.name]  # no temporary left
    assert said == [f"class-data archive for Spark's driver: {final} ({size >> 20} MiB)"]

    # A new session's driver JVM maps it.
    session = start_session()
    assert f"-XX:SharedArchiveFile={final}" in session["options"]
    assert str(final) in session["mapped"]

    # A partly written archive (a set-up killed while writing) has only its temporary name:
    # never handed to a JVM, and the session starts without an archive.
    partial = final.with_name(f".{final.name}.tmp-4242")
    partial.write_bytes(final.read_bytes()[: size // 2])
    final.unlink()
    assert driver_options({}) == []
    session = start_session()
    assert not any("SharedArchiveFile" in option for option in session["options"])
    assert not [path for path in session["mapped"] if path.startswith(str(own_cache))]
    # ... and set-up would not have renamed it: a JVM must map an archive first.
    with pytest.raises(RuntimeError, match="does not map"):
        check_archive(java, partial, "unused")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_dump_that_leaves_a_partial_archive_renames_nothing(own_cache: Path) -> None:
    java = java_executable()
    jsa = Path(os.path.realpath(java)).parent.parent / "lib" / "server" / "classes.jsa"
    if not jsa.is_file():
        pytest.skip("this JDK has no base class-data archive to cut short")

    def dump_cut_short(target: Path) -> str:
        target.write_bytes(jsa.read_bytes()[: jsa.stat().st_size // 2])
        return ""

    with pytest.raises(RuntimeError, match="does not map"):
        make_archive("partial", "k", java, dump_cut_short)
    assert list((own_cache / "cds").glob("*.jsa*")) == []


def test_an_archive_is_for_one_java_and_jar_set(
    own_cache: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    java = java_executable()
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"one")
    key = archive_key(java, [jar])
    assert archive_key(java, [jar]) == key
    archive = own_cache / "cds" / f"app-{key}.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"made")
    assert find_archive("app", key) == archive

    jar.write_bytes(b"other")  # another jar set: another key, and this archive is not used
    other = archive_key(java, [jar])
    assert other != key
    with caplog.at_level(logging.DEBUG, logger="fluvial.jvm_archive"):
        assert find_archive("app", other) is None
    assert f"app-{key}.jsa is for another Java or jar set" in caplog.text


def test_a_users_own_class_data_choice_wins(own_cache: Path) -> None:
    key = driver_key(java_executable())
    archive = own_cache / "cds" / f"{archive_name()}-{key}.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"stands for a made archive")
    assert f"-XX:SharedArchiveFile={archive}" in driver_options({})
    assert driver_options({"spark.driver.extraJavaOptions": "-Xshare:off"}) == []
    assert driver_options({"spark.driver.extraClassPath": "/opt/mine.jar"}) == []
