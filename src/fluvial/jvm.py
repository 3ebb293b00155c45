"""Finding Java and Maven, and resolving jars from Maven Central into a cache, once."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import re
import shutil
from importlib import resources
from pathlib import Path

from fluvial import children
from fluvial.errors import KafkaSetupError

MIN_JAVA = 17

_CENTRAL_ONLY_SETTINGS = """<settings>
  <mirrors>
    <mirror>
      <id>central-for-all</id>
      <mirrorOf>external:*,!central</mirrorOf>
      <url>https://repo.maven.apache.org/maven2</url>
    </mirror>
  </mirrors>
</settings>
"""


def cache_dir() -> Path:
    """Where resolved jars live: ``$FLUVIAL_CACHE_DIR``, else ``~/.cache/fluvial``."""
    root = os.environ.get("FLUVIAL_CACHE_DIR") or Path.home() / ".cache" / "fluvial"
    return Path(root)


def java_executable() -> str:
    """The ``java`` to run, checked to be version 17 or newer."""
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaSetupError(
            f"Java {MIN_JAVA}+ is required to run Kafka and Spark but no 'java' was found: "
            "install OpenJDK 17 (apt-get install openjdk-17-jdk-headless) or set JAVA_HOME"
        )
    out = java_version(java)
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    major = int(match.group(1)) if match else 0
    if major == 1 and match and match.group(2):  # "1.8.0" style
        major = int(match.group(2))
    if major < MIN_JAVA:
        raise KafkaSetupError(
            f"Java {MIN_JAVA}+ is required but {java} is version {major or 'unknown'}: "
            "install OpenJDK 17 or point JAVA_HOME at one"
        )
    return java


@functools.lru_cache(maxsize=8)
def java_version(java: str) -> str:
    """What ``java -version`` says (the build too), asked once per process."""
    return children.run([java, "-version"], capture_output=True, text=True).stderr


def maven_executable() -> str:
    mvn = shutil.which("mvn")
    if not mvn:
        raise KafkaSetupError(
            "Maven is required to resolve the Kafka and Spark jars but 'mvn' was not found: "
            "install it (apt-get install maven) and run the command again"
        )
    return mvn


def resolve_jars(pom_name: str) -> list[Path]:
    """Resolve the dependencies of a bundled pom into the cache (once) and return the jars.

    The cache key is a hash of the pom, so a version bump resolves afresh. A lock keeps two
    processes (say, two test sessions) from resolving into the same directory at once.
    """
    pom = resources.files("fluvial._jars").joinpath(pom_name).read_bytes()
    digest = hashlib.sha256(pom).hexdigest()[:12]
    target = cache_dir() / "jars" / f"{pom_name.removesuffix('.xml')}-{digest}"
    done = target / ".complete"
    if not done.exists():
        target.mkdir(parents=True, exist_ok=True)
        with open(target / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not done.exists():
                _run_maven(pom, target)
                done.touch()
    jars = sorted(target.glob("*.jar"))
    if not jars:
        raise KafkaSetupError(f"Maven resolved no jars into {target}: delete it and try again")
    return jars


def _run_maven(pom: bytes, target: Path) -> None:
    mvn = maven_executable()
    pom_path = target / "pom.xml"
    pom_path.write_bytes(pom)
    for stale in target.glob("*.jar"):
        stale.unlink()
    cmd = [
        mvn, "-q", "-B", "-f", str(pom_path), "dependency:copy-dependencies",
        f"-DoutputDirectory={target}", "-DincludeScope=runtime",
    ]  # fmt: skip
    if not (Path.home() / ".m2" / "settings.xml").exists():
        # Some upstream poms name extra repositories (mirrors of Central); send them all to
        # Central itself so resolution needs nothing beyond it. A user's own settings win.
        settings = target / "settings.xml"
        settings.write_text(_CENTRAL_ONLY_SETTINGS)
        cmd += ["-s", str(settings)]
    result = children.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        errors = [line for line in result.stdout.splitlines() if "ERROR" in line][:3]
        raise KafkaSetupError(
            "Maven could not resolve the jars (is Maven Central reachable?): "
            + (" | ".join(errors) or result.stderr.strip()[-500:])
        )


def classpath(jars: list[Path]) -> str:
    return os.pathsep.join(str(j) for j in jars)


def main() -> None:
    """``python -m fluvial.jvm``: resolve every bundled pom now (set-up and CI use it), then
    make the class-data archive of Spark's driver JVM."""
    java_executable()
    for pom in ("kafka.xml", "spark-kafka.xml"):
        jars = resolve_jars(pom)
        print(f"{pom}: {len(jars)} jars in {jars[0].parent}")
    # Last, since it starts Spark with the jars above; a failure is said, never raised.
    from fluvial.spark.class_archive import make_driver_archive

    make_driver_archive()


if __name__ == "__main__":
    main()
