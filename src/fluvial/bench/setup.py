"""Installing the peers: private virtual environments for the Python ones, Maven for Java.

The Python peers pin client libraries that clash with fluvial's own (Quix Streams needs
confluent-kafka < 2.13, Faust needs click < 8.4), so each gets its own virtual environment under
the fluvial cache, made with uv and pinned to the versions below. Installing is idempotent.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from fluvial import children
from fluvial.errors import FluvialError
from fluvial.jvm import _CENTRAL_ONLY_SETTINGS, cache_dir, java_executable, maven_executable

# Pinned so that a report names exactly what ran; bump deliberately.
PYTHON_PEERS = {
    "quix": ("quixstreams", "3.28.1"),
    "faust": ("faust-streaming", "0.15.3"),
}
REPO_ROOT = Path(__file__).resolve().parents[3]
REFERENCE_DIR = REPO_ROOT / "reference"
REFERENCE_JAR = REFERENCE_DIR / "target" / "fluvial-reference.jar"


class PeerSetupError(FluvialError):
    pass


def find_uv() -> str:
    """uv: on PATH, the one running us (``uv run`` sets ``$UV``), or the one ``make setup``
    installed into the checkout's ``.tools/bin``."""
    import os

    candidates = [
        shutil.which("uv"),
        os.environ.get("UV"),
        str(REPO_ROOT / ".tools" / "bin" / "uv"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise PeerSetupError(
        "installing the Python peers needs uv: run 'make setup' (it installs uv into "
        f"{REPO_ROOT / '.tools' / 'bin'}), or put uv on PATH (pip install uv)"
    )


def venv_dir(peer: str) -> Path:
    package, version = PYTHON_PEERS[peer]
    return cache_dir() / "bench" / f"{peer}-{version}"


def peer_python(peer: str, *, install: bool = True) -> Path:
    """The interpreter of a Python peer's virtual environment, installing it if needed."""
    root = venv_dir(peer)
    python = root / "bin" / "python"
    marker = root / ".installed"
    if marker.exists() and python.exists():
        return python
    if not install:
        raise PeerSetupError(f"{peer} is not installed: run 'fluvial bench setup'")
    uv = find_uv()
    package, version = PYTHON_PEERS[peer]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    steps = [
        [uv, "venv", "-q", "--allow-existing", "-p", py, str(root)],
        [uv, "pip", "install", "-q", "--python", str(python), f"{package}=={version}"],
    ]
    for step in steps:
        result = children.run(step, capture_output=True, text=True)
        if result.returncode != 0:
            raise PeerSetupError(
                f"installing {package}=={version} failed ({' '.join(step)}):\n"
                f"{(result.stdout + result.stderr).strip()[-2000:]}"
            )
    marker.write_text(f"{package}=={version}\n")
    return python


def reference_jar() -> Path:
    """The Kafka Streams reference app's jar, built with Maven if it is missing.

    The reference app belongs to the differential tests (``reference/``); the bench only runs
    it. Its build is up to date when the jar is newer than every source file.
    """
    sources = [REFERENCE_DIR / "pom.xml", *(REFERENCE_DIR / "src").rglob("*")]
    if not (REFERENCE_DIR / "pom.xml").exists():
        raise PeerSetupError(f"no Kafka Streams reference app at {REFERENCE_DIR}")
    newest = max(p.stat().st_mtime for p in sources if p.is_file())
    if REFERENCE_JAR.exists() and REFERENCE_JAR.stat().st_mtime >= newest:
        return REFERENCE_JAR
    java_executable()
    cmd = [maven_executable(), "-q", "-B", "-f", str(REFERENCE_DIR / "pom.xml"), "package"]
    if not (Path.home() / ".m2" / "settings.xml").exists():
        settings = cache_dir() / "bench" / "maven-settings.xml"
        settings.parent.mkdir(parents=True, exist_ok=True)
        settings.write_text(_CENTRAL_ONLY_SETTINGS)
        cmd += ["-s", str(settings)]
    result = children.run(cmd, capture_output=True, text=True)
    if result.returncode != 0 or not REFERENCE_JAR.exists():
        raise PeerSetupError(
            "building the Kafka Streams reference app failed:\n"
            f"{(result.stdout + result.stderr).strip()[-2000:]}"
        )
    return REFERENCE_JAR


def peer_version(peer: str) -> str:
    if peer in PYTHON_PEERS:
        package, version = PYTHON_PEERS[peer]
        return f"{package} {version}"
    return ""


def setup_all(peers: list[str]) -> dict[str, str]:
    """Install every named peer; returns peer -> 'ok' or the reason it could not be set up."""
    status = {}
    for peer in peers:
        try:
            if peer in PYTHON_PEERS:
                peer_python(peer)
            elif peer == "kafka-streams":
                reference_jar()
            status[peer] = "ok"
        except FluvialError as error:
            status[peer] = str(error)
    return status
