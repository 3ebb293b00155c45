"""``fluvial pack``: a packed Python environment for Spark executors that lack fluvial.

The archive is a virtual environment holding fluvial and every distribution it needs at run
time (confluent-kafka and rocksdict with their compiled libraries among them), copied file by
file from the environment fluvial runs in, so the executors get exactly the versions the driver
has. pyspark and py4j stay out: every Spark worker puts its own on the Python workers' path,
and they must match the cluster's Spark anyway.

The environment is packed with venv-pack, the tool Spark's documentation names for
``spark.archives``. As with any virtual environment, its ``bin/python`` links to the base
interpreter, which must exist at the same path on the workers (same Python build, as the
compiled wheels need anyway).

An archive is built once and reused until the environment changes: its name carries a
fingerprint of the interpreter, the platform, every packed distribution's name and version,
and fluvial's own files. Those include the compiled engine (``fluvial.compiled``): the
extensions beside their sources, the build's record, and mypyc's group library, which sits
beside the package and is packed with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata as metadata
import os
import platform
import shutil
import sys
import sysconfig
import tempfile
import time
import venv
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from fluvial.errors import ConfigError

#: Where archives are kept [default: ~/.cache/fluvial/pack].
PACK_DIR_ENV = "FLUVIAL_PACK_DIR"
#: The name under which executors unpack the archive (``spark.archives`` ``#NAME``).
ENV_NAME = "fluvial-env"
#: Provided by every Spark installation, at the cluster's version.
PROVIDED_BY_SPARK = frozenset({"pyspark", "py4j"})
#: Changes when the archive's layout changes, so old archives are not reused.
PACK_FORMAT = "1"
#: Archives of older environments go once unused this long (and held by no driver).
STALE_AFTER_S = 86_400


@dataclass(frozen=True)
class Packed:
    """A packed environment: the archive, and how executors run its Python."""

    archive: Path
    fingerprint: str
    distributions: tuple[str, ...]
    built: bool  # False when an existing archive was reused

    @property
    def spark_archive(self) -> str:
        """The ``spark.archives`` entry: unpacked as ``./fluvial-env`` in each executor."""
        return f"{self.archive}#{ENV_NAME}"

    @property
    def executor_python(self) -> str:
        return f"./{ENV_NAME}/bin/python"

    def hold(self) -> IO[bytes]:
        """Keep the archive from being removed as stale while a driver ships it (executors
        that join later fetch it from the driver): a shared lock, until the handle closes."""
        handle = open(self.archive, "rb")  # noqa: SIM115 - held for the application's life
        fcntl.flock(handle, fcntl.LOCK_SH)
        return handle


def pack_dir() -> Path:
    configured = os.environ.get(PACK_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "fluvial" / "pack"


# -- what goes in ---------------------------------------------------------------------------------


def runtime_distributions(root: str = "fluvial") -> list[metadata.Distribution]:
    """The installed distributions ``root`` needs at run time (with the extras it asks for),
    without ``root`` itself and without what Spark provides."""
    seen: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, frozenset[str]]] = [(root, frozenset())]
    done: set[tuple[str, frozenset[str]]] = set()
    while pending:
        name, extras = pending.pop()
        key = canonicalize_name(name)
        if (key, extras) in done or key in PROVIDED_BY_SPARK:
            continue
        done.add((key, extras))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise ConfigError(
                f"fluvial pack: {name}, which fluvial needs, is not installed in this "
                f"environment ({sys.prefix}); install it (e.g. `pip install {name}`) and pack "
                "again"
            ) from None
        if key != canonicalize_name(root):
            seen[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not any(
                requirement.marker.evaluate({"extra": extra}) for extra in (extras or {""})
            ):
                continue
            pending.append((requirement.name, frozenset(requirement.extras)))
    return sorted(seen.values(), key=lambda d: canonicalize_name(d.metadata["Name"]))


def _fluvial_package_dir() -> Path:
    import fluvial

    return Path(fluvial.__file__).resolve().parent


def _package_files(package: Path) -> list[Path]:
    """fluvial's files to pack: the package, and the compiled engine's group library beside it
    (``fluvial.compiled.GROUP_LIBRARY``), for any Python."""
    from fluvial.compiled import GROUP_LIBRARY

    files = [
        p
        for p in package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    ]
    files += package.parent.glob(f"{GROUP_LIBRARY}.*")
    return sorted(files)


def fingerprint(distributions: Iterable[metadata.Distribution]) -> str:
    """Changes whenever the packed environment would differ."""
    digest = hashlib.sha256()
    for part in (
        PACK_FORMAT,
        sys.version,
        os.path.realpath(sys._base_executable),  # type: ignore[attr-defined]
        sysconfig.get_platform(),
        platform.libc_ver()[1],
    ):
        digest.update(part.encode() + b"\0")
    for dist in distributions:
        digest.update(f"{dist.metadata['Name']}=={dist.version}\0".encode())
    package = _fluvial_package_dir()
    for path in _package_files(package):
        digest.update(str(path.relative_to(package.parent)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:20]


# -- building -------------------------------------------------------------------------------------


def ensure_packed(
    *, force: bool = False, directory: Path | None = None, say: Callable[[str], None] | None = None
) -> Packed:
    """The archive for the current environment: reused if one exists, else built."""
    say = say or (lambda _line: None)
    distributions = runtime_distributions()
    names = tuple(f"{d.metadata['Name']}=={d.version}" for d in distributions)
    digest = fingerprint(distributions)
    directory = directory or pack_dir()
    archive = directory / f"fluvial-env-{digest}.tar.gz"
    if archive.exists() and not force:
        archive.touch()  # in use: not stale
        return Packed(archive, digest, names, built=False)
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    say(f"packing fluvial and {len(distributions)} distributions for the executors")
    with tempfile.TemporaryDirectory(prefix="fluvial-pack-", dir=directory) as scratch:
        env_dir = Path(scratch) / ENV_NAME
        _build_env(env_dir, distributions)
        partial = Path(scratch) / archive.name
        _venv_pack(env_dir, partial)
        partial.chmod(0o644)  # no secret inside; other users of a shared pack dir may ship it
        os.replace(partial, archive)  # atomic: a concurrent reader sees a whole archive or none
    _remove_stale(directory, keep=archive)
    say(
        f"packed {archive} ({archive.stat().st_size / 1e6:.0f} MB) in "
        f"{time.monotonic() - started:.0f} s"
    )
    return Packed(archive, digest, names, built=True)


def _build_env(env_dir: Path, distributions: list[metadata.Distribution]) -> None:
    """A fresh virtual environment with the distributions' files copied in as installed."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(env_dir)
    purelib = Path(
        sysconfig.get_path("purelib", vars={"base": str(env_dir), "platbase": str(env_dir)})
    )
    for dist in distributions:
        files = dist.files
        if files is None:
            raise ConfigError(
                f"fluvial pack: {dist.metadata['Name']} {dist.version} has no record of its "
                "files (installed without a RECORD); reinstall it with pip or uv and pack again"
            )
        for entry in files:
            relative = Path(str(entry))
            if relative.parts and relative.parts[0] == "..":
                continue  # scripts and data outside site-packages: executors run none of them
            if "__pycache__" in relative.parts:
                continue
            source = Path(str(dist.locate_file(entry)))
            if not source.is_file():
                continue
            target = purelib / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    package = _fluvial_package_dir()
    for path in _package_files(package):
        target = purelib / path.relative_to(package.parent)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)


def _venv_pack(env_dir: Path, output: Path) -> None:
    import venv_pack

    try:
        venv_pack.pack(prefix=str(env_dir), output=str(output), verbose=False)
    except venv_pack.VenvPackException as error:
        raise ConfigError(f"fluvial pack: venv-pack failed: {error}") from None


def _remove_stale(directory: Path, keep: Path) -> None:
    """Older archives of this directory, unused for a day and held by no running driver."""
    cutoff = time.time() - STALE_AFTER_S
    for old in directory.glob("fluvial-env-*.tar.gz"):
        if old == keep:
            continue
        try:
            if old.stat().st_mtime >= cutoff:
                continue
            with open(old, "rb") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while one is held
                old.unlink()
        except OSError:
            pass


# -- shipping -------------------------------------------------------------------------------------


def is_cluster_master(master: str) -> bool:
    """Masters whose executors may run elsewhere: everything but ``local``."""
    return not master.strip().startswith("local")


def shipping_conf(packed: Packed, conf: dict[str, str]) -> dict[str, str]:
    """The ``spark.archives`` setting that ships the archive, beside any the user gave.

    The executors' Python is the driver's ``PYSPARK_PYTHON`` (Spark sends it with every
    task): the engine sets it to :attr:`Packed.executor_python`.
    """
    archives = [a.strip() for a in conf.get("spark.archives", "").split(",") if a.strip()]
    return {"spark.archives": ",".join([*archives, packed.spark_archive])}
