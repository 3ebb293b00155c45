"""The class-data archive of Spark's driver JVM: made at set-up, mapped by every session after.

Most of a Spark session's start is its driver JVM loading some ten thousand classes from
Spark's jars (on a local master the executors run in that JVM too). Set-up
(``python -m fluvial.jvm``) runs one session as the engine runs it (its UI, a broadcast, a
Python job through fluvial's worker daemon) with ``-XX:ArchiveClassesAtExit``, so the archive
holds what the engine's start needs; :func:`driver_options` then hands
``-XX:SharedArchiveFile`` to every session whose Java build and Spark jars match it
(:mod:`fluvial.jvm_archive` has the rules). A user's own ``-Xshare:off`` in
``spark.driver.extraJavaOptions`` comes after it and wins.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from fluvial import children
from fluvial.jvm import java_executable
from fluvial.jvm_archive import (
    QUIET,
    archive_dir,
    archive_key,
    find_archive,
    make_archive,
    use_options,
)

log = logging.getLogger(__name__)

NAME = "spark-driver"
DUMP_TIMEOUT_S = 600.0
_CLASS_PATH_LINE = "fluvial-class-path: "
# Options that already decide class-data sharing for this JVM: theirs, not ours.
_OWN_CHOICE = ("SharedArchiveFile", "ArchiveClassesAtExit", "-Xshare")


def spark_home() -> Path:
    """The Spark that PySpark launches (``$SPARK_HOME``, else pyspark's own)."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home()).resolve()


def archive_name() -> str:
    """The archive's name for this Spark installation: making one for another virtualenv's
    Spark never removes this one's."""
    return f"{NAME}-{hashlib.sha256(str(spark_home()).encode()).hexdigest()[:8]}"


def driver_key(java: str) -> str:
    """What the driver's archive holds for: this Java build and Spark's jars."""
    from pyspark.version import __version__

    jars = sorted((spark_home() / "jars").glob("*.jar"))
    return archive_key(java, jars, extra=f"{NAME} {__version__}")


def driver_options(conf: Mapping[str, str]) -> list[str]:
    """The JVM options that map the driver's archive into a session with ``conf``, or none:
    no archive for this Java and these jars, a class path of the user's own in front of
    Spark's, or a class-data choice of the user's own."""
    own = conf.get("spark.driver.extraJavaOptions", "")
    if any(flag in own for flag in _OWN_CHOICE) or "PYSPARK_GATEWAY_PORT" in os.environ:
        return []  # the options' own choice, or a JVM that is running already
    if conf.get("spark.driver.extraClassPath"):
        log.debug("no class-data archive for Spark's driver: spark.driver.extraClassPath "
                  "puts other classes first")  # fmt: skip
        return []
    archive = find_archive(archive_name(), driver_key(java_executable()))
    return use_options(archive) if archive is not None else []


def make_driver_archive(say: Callable[[str], None] = print) -> Path | None:
    """Make the driver's archive for this Java and Spark unless it exists (set-up). A failure
    is said, never raised: Spark starts without the archive, only more slowly."""
    try:
        java = java_executable()
        path = make_archive(archive_name(), driver_key(java), java, _dump)
    except Exception as error:
        say(f"no class-data archive for Spark's driver ({error}); Spark starts without it")
        return None
    say(f"class-data archive for Spark's driver: {path} ({path.stat().st_size >> 20} MiB)")
    return path


def _dump(target: Path) -> str:
    """Run the archiving session in a process of its own; the class path its JVM had."""
    result = children.run(
        [sys.executable, "-m", __name__, str(target)],
        capture_output=True,
        text=True,
        timeout=DUMP_TIMEOUT_S,
        cwd=archive_dir(),
    )
    for line in result.stdout.splitlines():
        if result.returncode == 0 and line.startswith(_CLASS_PATH_LINE):
            return str(json.loads(line.removeprefix(_CLASS_PATH_LINE)))
    said = [line for line in (result.stderr or result.stdout).strip().splitlines()][-3:]
    raise RuntimeError(
        f"the archiving Spark session failed (exit code {result.returncode}): {' | '.join(said)}"
    )


def _archiving_session(target: str) -> None:
    """One Spark session as the engine runs it, whose JVM writes ``target`` as it exits."""
    from fluvial.spark.engine import DRIVER_JAVA_OPTIONS
    from fluvial.spark.session import local_spark_session

    options = [DRIVER_JAVA_OPTIONS, f"-XX:ArchiveClassesAtExit={target}", *QUIET]
    spark = local_spark_session(
        "local[2]",
        app_name="fluvial class-data archive",
        extra_conf={
            "spark.ui.enabled": "true",
            "spark.ui.port": "0",
            "spark.python.daemon.module": "fluvial.spark.daemon",
            "spark.driver.extraJavaOptions": " ".join(options),
        },
    )
    sc = spark.sparkContext
    shared = sc.broadcast({"slots": 2})
    sc.parallelize(range(2), 2).mapPartitions(lambda part: [shared.value, *part]).collect()
    class_path = sc._jvm.System.getProperty("java.class.path")  # type: ignore[union-attr]
    gateway = sc._gateway.proc  # type: ignore[union-attr]
    spark.stop()
    # The JVM exits when its input ends, and writes the archive as it exits.
    gateway.stdin.close()
    code = gateway.wait(DUMP_TIMEOUT_S)
    if code != 0:
        raise SystemExit(f"the archiving JVM exited with code {code}")
    print(_CLASS_PATH_LINE + json.dumps(class_path), flush=True)


if __name__ == "__main__":
    _archiving_session(sys.argv[1])
