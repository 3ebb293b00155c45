"""A local Apache Kafka cluster in KRaft mode, provisioned from Maven-resolved jars.

One data directory holds one cluster: a ``cluster.json`` with its ports and cluster id, and one
folder per broker with its ``server.properties``, log directory, broker log and pid file. Every
command (start, status, stop, logs) addresses a cluster by its data directory, so tests and
benchmarks can run several clusters on different ports at once.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType

from fluvial import children
from fluvial.errors import KafkaSetupError
from fluvial.jvm import classpath, java_executable, resolve_jars
from fluvial.kafka import security
from fluvial.redaction import redacted

KAFKA_VERSION = "4.3.1"
DEFAULT_PORT = 9092
DEFAULT_HEAP = "1g"
HOST = "127.0.0.1"

_LOG4J2 = """\
Configuration:
  status: warn
  Appenders:
    RollingFile:
      name: file
      fileName: "{log}"
      filePattern: "{log}.%i"
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
      SizeBasedTriggeringPolicy:
        size: 20MB
      DefaultRolloverStrategy:
        max: 2
  Loggers:
    Root:
      level: info
      AppenderRef:
        - ref: file
    Logger:
      - name: kafka.request.logger
        level: warn
      - name: org.apache.kafka.controller
        level: warn
      - name: state.change.logger
        level: warn
"""


def default_data_dir(port: int = DEFAULT_PORT) -> Path:
    """``$FLUVIAL_HOME/kafka-<port>`` (``~/.fluvial`` by default): one cluster per port."""
    home = Path(os.environ.get("FLUVIAL_HOME") or Path.home() / ".fluvial")
    return home / f"kafka-{port}"


def find_cluster_on_port(port: int) -> Path | None:
    """The data directory of a running local cluster with a broker on ``port``, wherever it
    was started (``--data-dir`` anywhere): found from its broker processes' command lines."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"kafka.Kafka" not in args:
            continue
        properties = Path(args[args.index(b"kafka.Kafka") + 1].decode(errors="replace"))
        data_dir = properties.parent.parent
        if not (data_dir / "cluster.json").exists():
            continue
        try:
            if port in LocalKafka(data_dir).broker_ports:
                return data_dir
        except Exception:  # noqa: BLE001 - an unreadable cluster is not the one asked for
            continue
    return None


def port_is_free(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _outgoing_port_range() -> tuple[int, int]:
    """The local ports the OS gives outgoing connections (Linux's default if unknown)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free port for a private cluster or server, outside the OS's range for outgoing
    connections.

    A broker that a fault test kills must bind its port again on restart; a port from that
    range may meanwhile be the local port of any client's connection, and the restart would
    fail with "Address already in use".
    """
    low, high = _outgoing_port_range()
    # The wider gap beside that range, less a margin for a cluster's next few ports.
    start, end = max((10_000, low - 16), (high + 1, 65_535 - 16), key=lambda gap: gap[1] - gap[0])
    if end - start >= 1000:
        chooser = random.SystemRandom()
        for _ in range(200):
            port = chooser.randrange(start, end)
            if port_is_free(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as dead.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class _ClusterFile:
    cluster_id: str
    brokers: int
    port: int
    controller_ports: list[int]
    heap: str
    secure: bool = False


class LocalKafka:
    """A local KRaft cluster of 1 or more combined broker/controller nodes on 127.0.0.1.

    Use it as a context manager (``with LocalKafka(port=...) as kafka: kafka.bootstrap_servers``)
    or call ``start()``/``stop()``. ``start()`` is idempotent; data survives ``stop()``.
    """

    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        port: int = DEFAULT_PORT,
        brokers: int = 1,
        heap: str = DEFAULT_HEAP,
        startup_timeout_s: float = 90.0,
        stop_on_exit: bool = True,
        broker_config: dict[str, str | int] | None = None,
        secure: bool = False,
        credentials: security.Credentials | None = None,
    ) -> None:
        if brokers < 1:
            raise KafkaSetupError(f"--brokers must be at least 1, got {brokers}")
        self.data_dir = Path(data_dir) if data_dir else default_data_dir(port)
        self.port = port
        self.brokers = brokers
        self.heap = heap
        self.startup_timeout_s = startup_timeout_s
        self.stop_on_exit = stop_on_exit
        # Extra server.properties entries, over fluvial's defaults.
        self.broker_config = dict(broker_config or {})
        # secure: a SASL_SSL (SCRAM-SHA-512) listener, TLS from a CA made in the data dir, and
        # StandardAuthorizer with the credentials' admin as super-user.
        self.secure = secure
        self.credentials = credentials
        saved = self._read_cluster_file()
        if saved is not None:
            # An existing cluster keeps the shape it was formatted with.
            self.port, self.brokers, self.secure = saved.port, saved.brokers, saved.secure

    # -- addressing ---------------------------------------------------------------------------

    @property
    def broker_ports(self) -> list[int]:
        """The client port of each broker: ``port``, ``port + 1``, ... (one per broker)."""
        return [self.port + i for i in range(self.brokers)]

    @property
    def bootstrap_servers(self) -> str:
        """The ``host:port`` of every broker, comma-separated, for
        ``StreamsConfig.bootstrap_servers``."""
        return ",".join(f"{HOST}:{p}" for p in self.broker_ports)

    def broker_dir(self, node_id: int) -> Path:
        """The data directory of broker ``node_id`` (1-based): its logs and pid file."""
        return self.data_dir / f"broker-{node_id}"

    def log_file(self, node_id: int = 1) -> Path:
        """The ``server.log`` of broker ``node_id`` (1-based)."""
        return self.broker_dir(node_id) / "server.log"

    def pid(self, node_id: int) -> int | None:
        """The process id of broker ``node_id`` (1-based) while it runs; None when it does not."""
        try:
            pid = int((self.broker_dir(node_id) / "broker.pid").read_text())
        except (OSError, ValueError):
            return None
        return pid if _pid_alive(pid) else None

    def node_ids(self) -> list[int]:
        """The brokers' node ids: ``1`` to ``brokers``."""
        return list(range(1, self.brokers + 1))

    # -- security -----------------------------------------------------------------------------

    @property
    def tls(self) -> security.TlsFiles:
        """The cluster's TLS files (certificate authority, broker and client certificates), under
        ``<data_dir>/security``.
        """
        return security.TlsFiles(self.data_dir / "security")

    @property
    def admin_config_file(self) -> Path:
        """Client settings of the admin super-user, password included (mode 0600)."""
        return self.tls.admin_properties

    def client_config(self, user: str | None = None, password: str | None = None) -> dict[str, str]:
        """librdkafka settings for a client of this cluster ({} for a plain cluster).

        Without arguments: the admin's settings, password included, from the data dir.
        """
        if not self.secure:
            return {}
        if user is None:
            _bootstrap, settings = security.split_bootstrap(
                security.read_properties(self.admin_config_file)
            )
            return settings
        return security.client_properties(self.tls, user, password)

    def add_users(self, passwords: dict[str, str]) -> None:
        """Create or update SCRAM-SHA-512 users of a running secured cluster."""
        security.upsert_scram_users(self.bootstrap_servers, self.client_config(), passwords)

    def _credentials(self) -> security.Credentials:
        if self.credentials is not None:
            return self.credentials
        if self.admin_config_file.exists():
            saved = self.client_config()
            return security.Credentials(
                saved["sasl.username"], {saved["sasl.username"]: saved["sasl.password"]}
            )
        return security.read_credentials()  # the environment, or a clear error

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, progress: Callable[[str], None] | None = None) -> str:
        """Start every node that is not running, wait until the cluster serves, return bootstrap."""
        say = progress or (lambda _msg: None)
        if self.is_running():
            return self.bootstrap_servers
        java = java_executable()
        say(f"resolving Apache Kafka {KAFKA_VERSION} jars with Maven (cached after the first time)")
        cp = classpath(resolve_jars("kafka.xml"))
        cluster = self._read_cluster_file() or self._new_cluster_file()
        if self.secure:
            credentials = self._credentials()  # before any file is written: fail early
            say("making the cluster's certificate authority and broker certificate")
            security.ensure_tls(self.tls.directory, java)
            if self.credentials is not None or not self.admin_config_file.exists():
                security.write_client_properties(
                    self.admin_config_file,
                    self.bootstrap_servers,
                    self.client_config(credentials.admin, credentials.admin_password),
                )
        for node_id in self.node_ids():
            if self.pid(node_id) is not None:
                continue
            port = self.broker_ports[node_id - 1]
            if not port_is_free(port):
                raise KafkaSetupError(
                    f"port {port} on {HOST} is already in use: choose another with --port, or stop "
                    f"whatever holds it (fluvial kafka stop --port {port} if it is a fluvial cluster)"
                )
            self._write_node_config(cluster, node_id)
            self._format_if_needed(java, cp, cluster, node_id)
            say(f"starting broker {node_id} on {HOST}:{port}")
            self._launch(java, cp, node_id)
        self._wait_ready(say)
        if self.secure and self.credentials is not None:
            others = {u: p for u, p in self.credentials.passwords.items() if u != credentials.admin}
            self.add_users(others)
        return self.bootstrap_servers

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every node: SIGTERM for a clean shutdown, SIGKILL if it does not exit in time."""
        pids = [p for p in (self.pid(n) for n in self.node_ids()) if p is not None]
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
            time.sleep(0.1)
        for pid in pids:
            if _pid_alive(pid):
                _signal(pid, signal.SIGKILL)
        for pid in pids:
            _reap(pid)
        for node_id in self.node_ids():
            (self.broker_dir(node_id) / "broker.pid").unlink(missing_ok=True)

    def kill_broker(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        """Send a signal to one broker (fault injection: ``kill -9``, ``SIGSTOP``)."""
        pid = self.pid(node_id)
        if pid is None:
            raise KafkaSetupError(f"broker {node_id} is not running")
        _signal(pid, sig)
        if sig == signal.SIGKILL:
            _reap(pid)
            (self.broker_dir(node_id) / "broker.pid").unlink(missing_ok=True)

    def start_broker(self, node_id: int) -> None:
        """Restart one stopped broker of a running cluster and wait until it serves again."""
        if self.pid(node_id) is None:
            self._launch(java_executable(), classpath(resolve_jars("kafka.xml")), node_id)
        self._wait_ready(lambda _m: None)

    def is_running(self) -> bool:
        """Whether every broker's process is alive and the cluster answers clients."""
        return all(self.pid(n) is not None for n in self.node_ids()) and self._serving()

    def status(self) -> dict[str, object]:
        """What ``fluvial kafka status --json`` prints: data directory, bootstrap servers, Kafka
        version, each broker's pid and port, and whether the cluster serves clients.
        """
        nodes = {
            node_id: {"pid": self.pid(node_id), "port": self.broker_ports[node_id - 1]}
            for node_id in self.node_ids()
        }
        return {
            "data_dir": str(self.data_dir),
            "bootstrap_servers": self.bootstrap_servers,
            "kafka_version": KAFKA_VERSION,
            "brokers": nodes,
            "serving": self._serving(),
            "secure": self.secure,
            **(
                {"client_settings": redacted(self.client_config())}
                if self.secure and self.admin_config_file.exists()
                else {}
            ),
        }

    def tail_log(self, node_id: int = 1, lines: int = 40) -> str:
        """The last ``lines`` lines of broker ``node_id``'s log (and of its stdout), for errors."""
        path = self.log_file(node_id)
        stdout = self.broker_dir(node_id) / "stdout.log"
        text = ""
        for candidate in (path, stdout):
            if candidate.exists():
                text += "".join(candidate.read_text(errors="replace").splitlines(True)[-lines:])
        return text

    def __enter__(self) -> LocalKafka:
        try:
            self.start()
        except BaseException:
            # A start that fails or is interrupted (Ctrl-C, SIGTERM) part-way may have launched
            # brokers already: nothing would stop them, as __exit__ never runs.
            if self.stop_on_exit:
                self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.stop_on_exit:
            self.stop()

    # -- internals ----------------------------------------------------------------------------

    def _cluster_path(self) -> Path:
        return self.data_dir / "cluster.json"

    def _read_cluster_file(self) -> _ClusterFile | None:
        try:
            return _ClusterFile(**json.loads(self._cluster_path().read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def _new_cluster_file(self) -> _ClusterFile:
        controller_ports: list[int] = []
        while len(controller_ports) < self.brokers:
            candidate = free_port()
            if candidate not in controller_ports and candidate not in self.broker_ports:
                controller_ports.append(candidate)
        cluster_id = "-"
        while cluster_id.startswith("-"):  # a leading '-' would read as a command-line flag
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        cluster = _ClusterFile(
            cluster_id, self.brokers, self.port, controller_ports, self.heap, self.secure
        )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._cluster_path().write_text(json.dumps(asdict(cluster), indent=2))
        return cluster

    def _write_node_config(self, cluster: _ClusterFile, node_id: int) -> None:
        node_dir = self.broker_dir(node_id)
        node_dir.mkdir(parents=True, exist_ok=True)
        voters = ",".join(
            f"{n}@{HOST}:{cluster.controller_ports[n - 1]}" for n in range(1, cluster.brokers + 1)
        )
        replication = min(3, cluster.brokers)
        # One node cannot meet the default transaction-log settings (RF 3, min ISR 2).
        min_isr = 2 if cluster.brokers >= 3 else 1
        props = {
            "process.roles": "broker,controller",
            "node.id": node_id,
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{HOST}:{self.broker_ports[node_id - 1]},"
            f"CONTROLLER://{HOST}:{cluster.controller_ports[node_id - 1]}",
            "advertised.listeners": f"PLAINTEXT://{HOST}:{self.broker_ports[node_id - 1]}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": node_dir / "logs",
            "num.partitions": 1,
            "default.replication.factor": replication,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replication,
            "offsets.topic.num.partitions": 10,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": 10,
            "group.initial.rebalance.delay.ms": 0,
            # As production clusters run: a topic is created on purpose (fluvial topics
            # create, fluvial run for its internal topics), never by a client's first use, so
            # nothing passes here on a topic a real cluster would not have.
            "auto.create.topics.enable": "false",
            "delete.topic.enable": "true",
            "log.retention.hours": -1,
            "log.segment.bytes": 64 * 1024 * 1024,
            "unclean.leader.election.enable": "false",
            # Abort timed-out transactions within a second of their timeout (default 10 s), so
            # a writer that overruns transaction.timeout.ms finds out promptly.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
        }
        if cluster.secure:
            props.update(
                security.broker_security_properties(
                    self.tls,
                    self._credentials(),
                    port=self.broker_ports[node_id - 1],
                    controller_port=cluster.controller_ports[node_id - 1],
                    host=HOST,
                )
            )
        props.update(self.broker_config)
        text = "".join(f"{key}={value}\n" for key, value in props.items())
        if cluster.secure:  # it holds the admin's and the keystore's passwords
            security._private_file(node_dir / "server.properties", text)
        else:
            (node_dir / "server.properties").write_text(text)
        (node_dir / "log4j2.yaml").write_text(_LOG4J2.format(log=node_dir / "server.log"))

    def _format_if_needed(self, java: str, cp: str, cluster: _ClusterFile, node_id: int) -> None:
        node_dir = self.broker_dir(node_id)
        if (node_dir / "logs" / "meta.properties").exists():
            return
        args = [
            "-cp", cp, f"-Dlog4j2.configurationFile={node_dir / 'log4j2.yaml'}",
            "kafka.tools.StorageTool", "format", "-t", cluster.cluster_id,
            "-c", str(node_dir / "server.properties"), "--ignore-formatted",
        ]  # fmt: skip
        if not cluster.secure:
            result = children.run([java, *args], capture_output=True, text=True)
        else:
            # The admin's SCRAM credential is bootstrapped into the metadata log at format
            # time. The java launcher reads it from an argument file, so the password never
            # shows on a command line.
            credentials = self._credentials()
            scram = (
                f"{security.SCRAM_MECHANISM}=[name={credentials.admin},"
                f"password={credentials.admin_password}]"
            )
            argfile = node_dir / "format.args"
            security._private_file(
                argfile, "\n".join(f'"{a}"' for a in [*args, "--add-scram", scram])
            )
            try:
                result = children.run([java, f"@{argfile}"], capture_output=True, text=True)
            finally:
                argfile.unlink(missing_ok=True)
        if result.returncode != 0:
            message = (result.stderr or result.stdout).strip()[-800:]
            if cluster.secure:
                message = message.replace(self._credentials().admin_password, "***")
            raise KafkaSetupError(f"formatting the storage of broker {node_id} failed: {message}")

    def _launch(self, java: str, cp: str, node_id: int) -> None:
        node_dir = self.broker_dir(node_id)
        cmd = [
            java, f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={node_dir / 'log4j2.yaml'}",
            f"-Dkafka.logs.dir={node_dir}",
            "-cp", cp, "kafka.Kafka", str(node_dir / "server.properties"),
        ]  # fmt: skip
        # The broker's own secrets are in server.properties (mode 0600): it needs none of the
        # ones the CLI read from its environment.
        with open(node_dir / "stdout.log", "ab") as out:
            proc = children.popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C in the terminal must not kill the broker
            )  # fmt: skip
        (node_dir / "broker.pid").write_text(str(proc.pid))

    def _serving(self) -> bool:
        from confluent_kafka.admin import AdminClient

        if not any(not port_is_free(p) for p in self.broker_ports):
            return False
        settings = self.client_config() if self.secure and self.admin_config_file.exists() else {}
        if self.secure and not settings:
            return False
        admin = AdminClient(
            {"bootstrap.servers": self.bootstrap_servers, **settings, "log_level": 0}
        )
        try:
            metadata = admin.list_topics(timeout=3)
        except Exception:
            return False
        return len(metadata.brokers) == self.brokers

    def _wait_ready(self, say: Callable[[str], None]) -> None:
        say("waiting for the cluster to elect a controller and register every broker")
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            dead = [n for n in self.node_ids() if self.pid(n) is None]
            if dead:
                raise KafkaSetupError(
                    f"broker {dead[0]} exited during start-up; the end of its log:\n"
                    + self.tail_log(dead[0])
                )
            if self._serving():
                return
            time.sleep(0.5)
        raise KafkaSetupError(
            f"the cluster did not come up within {self.startup_timeout_s:.0f} s; "
            "the end of broker 1's log:\n" + self.tail_log(1)
        )


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _reap(pid: int) -> None:
    """Collect a broker that this process started, so no zombie entry is left behind."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            done, _status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child: its own parent (or init) reaps it
        if done:
            return
        time.sleep(0.05)
