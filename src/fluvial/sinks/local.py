"""A private PostgreSQL cluster for tests, benchmarks and examples: ``initdb`` + ``pg_ctl``.

It uses the server binaries of the machine's PostgreSQL (Debian's ``postgresql`` package puts
them in ``/usr/lib/postgresql/<version>/bin``; ``FLUVIAL_PG_BIN`` points elsewhere). The cluster
listens on 127.0.0.1 only, on the port given, with its data and socket in one directory.

PostgreSQL refuses to run as root. When this process is root, the server runs as the
``postgres`` system user (or ``nobody``) through ``runuser``, and the data directory is handed
to that user.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from fluvial import children
from fluvial.errors import FluvialError

HOST = "127.0.0.1"
SUPERUSER = "postgres"


class PostgresSetupError(FluvialError):
    """The local PostgreSQL could not be found or started."""


# In /usr/sbin on Debian, which a reduced PATH (a CI job's, a service's) may leave out.
_RUNUSER = shutil.which("runuser") or next(
    (p for p in ("/usr/sbin/runuser", "/sbin/runuser") if os.path.exists(p)), "runuser"
)


def find_bin_dir() -> Path:
    """The directory holding ``initdb`` and ``pg_ctl``: ``FLUVIAL_PG_BIN``, the newest
    ``/usr/lib/postgresql/*/bin``, or the one on PATH."""
    configured = os.environ.get("FLUVIAL_PG_BIN")
    candidates = [Path(configured)] if configured else []
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    candidates += sorted((Path(v) for v in versions), key=lambda p: _version(p), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for candidate in candidates:
        if (candidate / "initdb").is_file() and (candidate / "pg_ctl").is_file():
            return candidate
    raise PostgresSetupError(
        "no PostgreSQL server binaries (initdb, pg_ctl) found: install Debian's 'postgresql' "
        "package (apt-get install -y postgresql, as .ci/run does) or set FLUVIAL_PG_BIN to the "
        "directory that holds them"
    )


def _version(bin_dir: Path) -> float:
    try:
        return float(bin_dir.parent.name)
    except ValueError:
        return 0.0


def _server_user() -> str | None:
    """The user the server runs as: None (this user) unless this process is root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(name)
            return name
    raise PostgresSetupError(
        "running as root and neither a 'postgres' nor a 'nobody' user exists; PostgreSQL "
        "refuses to run as root: create a 'postgres' user or run as another user"
    )


class LocalPostgres:
    """A throwaway PostgreSQL cluster::

        with LocalPostgres(port=free_port()) as pg:
            psycopg.connect(pg.dsn)

    ``durable=False`` turns off fsync and synchronous commit: fine for tests whose server is
    never killed, and much kinder to a shared disk. Benchmarks keep the default.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        port: int,
        durable: bool = True,
        database: str = "postgres",
    ) -> None:
        self.port = port
        self.durable = durable
        self.database = database
        self._owns_dir = data_dir is None
        # The server user must reach the data directory: a fresh directory under the system's
        # temp dir (world-traversable), not under a root-only pytest tmp_path.
        self.root = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="fluvial-pg-"))
        self.data_dir = self.root / "data"
        self.log_file = self.root / "postgres.log"
        self.bin_dir = find_bin_dir()
        self.user = _server_user()

    @property
    def dsn(self) -> str:
        return f"postgresql://{SUPERUSER}@{HOST}:{self.port}/{self.database}"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self.user is not None:
            cmd = [_RUNUSER, "-u", self.user, "--", *cmd]
        result = children.run(cmd, capture_output=True, text=True, check=False, cwd=self.root)
        if check and result.returncode != 0:
            raise PostgresSetupError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip() or result.stdout}"
                f"{self._log_tail()}"
            )
        return result

    def _log_tail(self) -> str:
        try:
            lines = self.log_file.read_text(errors="replace").splitlines()[-15:]
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(lines) if lines else ""

    def start(self, timeout_s: float = 60) -> LocalPostgres:
        self.root.mkdir(parents=True, exist_ok=True)
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        if not (self.data_dir / "PG_VERSION").exists():
            # Trust on 127.0.0.1 only: a private, throwaway cluster with no password to leak.
            self._run(
                "initdb", "-D", str(self.data_dir), "-U", SUPERUSER, "--auth=trust",
                "--encoding=UTF8", "--locale=C", "--no-instructions",
            )  # fmt: skip
        options = [
            f"-p {self.port}",
            f"-c listen_addresses={HOST}",
            f"-c unix_socket_directories={self.root}",
            "-c max_connections=200",
        ]
        if not self.durable:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(
            "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log_file),
            "-o", " ".join(options), "-w", "-t", str(int(timeout_s)), "start",
        )  # fmt: skip
        self._wait_ready(timeout_s)
        return self

    def _wait_ready(self, timeout_s: float) -> None:
        import psycopg

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                psycopg.connect(self.dsn, connect_timeout=5).close()
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    raise PostgresSetupError(
                        f"PostgreSQL on {HOST}:{self.port} did not accept connections within "
                        f"{timeout_s:.0f} s: {exc}{self._log_tail()}"
                    ) from exc
                time.sleep(0.2)

    def stop(self) -> None:
        if not (self.data_dir / "postmaster.pid").exists():
            return
        result = self._run("pg_ctl", "-D", str(self.data_dir), "-m", "fast", "-w", "stop",
                           check=False)  # fmt: skip
        if result.returncode != 0:
            self._run("pg_ctl", "-D", str(self.data_dir), "-m", "immediate", "-w", "stop",
                      check=False)  # fmt: skip

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        try:
            return self.start()
        except BaseException:
            self.remove() if self._owns_dir else self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._owns_dir:
            self.remove()
        else:
            self.stop()
