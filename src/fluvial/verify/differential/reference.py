"""Building the Kafka Streams reference project (``reference/`` in fluvial's source tree).

``mvn -q -B package`` there leaves ``target/fluvial-reference.jar`` with its dependencies in
``target/lib``; it is rebuilt only when the pom or a source file changed.
"""

from __future__ import annotations

import fcntl
import hashlib
from pathlib import Path

from fluvial import children
from fluvial.errors import StreamsError
from fluvial.jvm import _CENTRAL_ONLY_SETTINGS, java_executable, maven_executable

REFERENCE_DIR = Path(__file__).resolve().parents[4] / "reference"
TARGET = REFERENCE_DIR / "target"
JAR = TARGET / "fluvial-reference.jar"


class ReferenceBuildError(StreamsError):
    pass


def _sources_digest() -> str:
    """A hash of the pom and every source file: the jar is rebuilt only when one changes."""
    digest = hashlib.sha256()
    files = [REFERENCE_DIR / "pom.xml", *sorted((REFERENCE_DIR / "src").rglob("*"))]
    for path in files:
        if path.is_file():
            digest.update(str(path.relative_to(REFERENCE_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_reference_jar() -> Path:
    """``mvn -q -B package`` in ``reference/`` unless the jar is up to date; returns the jar.

    A file lock keeps two builds from running at once; the second finds the jar built.
    """
    if not (REFERENCE_DIR / "pom.xml").exists():
        raise ReferenceBuildError(
            f"the Kafka Streams reference project is not at {REFERENCE_DIR}: differential "
            "verification runs from a source checkout of fluvial"
        )
    java_executable()  # clear errors if Java or Maven is missing
    mvn = maven_executable()
    TARGET.mkdir(exist_ok=True)
    stamp = TARGET / ".sources-sha256"
    with open(TARGET / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        digest = _sources_digest()
        if JAR.exists() and stamp.exists() and stamp.read_text() == digest:
            return JAR
        cmd = [mvn, "-q", "-B", "-f", str(REFERENCE_DIR / "pom.xml"), "package"]
        if not (Path.home() / ".m2" / "settings.xml").exists():
            # As for fluvial's own jars: resolve from Maven Central only, unless the user has
            # settings of their own.
            settings = TARGET / "settings.xml"
            settings.write_text(_CENTRAL_ONLY_SETTINGS)
            cmd += ["-s", str(settings)]
        result = children.run(cmd, capture_output=True, text=True)
        if result.returncode != 0 or not JAR.exists():
            output = (result.stdout + result.stderr).strip()
            raise ReferenceBuildError(
                f"building the Kafka Streams reference app failed ({' '.join(cmd)}); is Maven "
                f"Central reachable? Last output:\n{output[-3000:]}"
            )
        stamp.write_text(digest)
    return JAR
