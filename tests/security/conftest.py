"""A secured local cluster (SASL_SSL, SCRAM-SHA-512, ACLs enforced) for the security tests.

Passwords are made fresh for every session, so a scan of the runs' logs, outputs, metrics and
command lines can look for the exact strings.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fluvial.kafka import LocalKafka, free_port
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.security import Credentials, write_client_properties
from tests.conftest import TEST_BROKER_HEAP


@dataclass
class SecureCluster:
    kafka: LocalKafka
    credentials: Credentials
    directory: Path

    @property
    def bootstrap(self) -> str:
        return self.kafka.bootstrap_servers

    def admin(self) -> dict[str, str]:
        return self.kafka.client_config()

    def settings(self, user: str, password: str | None = None) -> dict[str, str]:
        return self.kafka.client_config(user, password or self.credentials.passwords[user])

    def properties_file(self, user: str, password: str | None = None) -> Path:
        path = self.directory / f"{user}-{secrets.token_hex(4)}.properties"
        write_client_properties(path, self.bootstrap, self.settings(user, password))
        return path

    def new_user(self, label: str) -> str:
        """A fresh SCRAM user, so that its ACLs are only the ones a test gives it."""
        user = f"{label}-{secrets.token_hex(4)}"
        self.credentials.passwords[user] = secrets.token_urlsafe(18)
        self.kafka.add_users({user: self.credentials.passwords[user]})
        return user

    def secrets(self) -> list[str]:
        """Every password and key password of this cluster."""
        return [*self.credentials.passwords.values(), self.kafka.tls.store_password()]

    def create_topic(self, name: str, partitions: int = 1) -> str:
        create_topics(self.bootstrap, [TopicSpec(name, partitions)], admin_config=self.admin())
        return name


@pytest.fixture(scope="session")
def secure_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    directory = tmp_path_factory.mktemp("secure-kafka")
    passwords = {name: secrets.token_urlsafe(18) for name in ("admin",)}
    credentials = Credentials("admin", passwords)
    cluster = LocalKafka(
        directory / "data",
        port=free_port(),
        heap=TEST_BROKER_HEAP,
        secure=True,
        credentials=credentials,
    )
    with cluster:
        yield SecureCluster(cluster, credentials, directory)


@pytest.fixture(scope="session")
def command_lines() -> Iterator[set[str]]:
    """Every process command line seen on this machine while the tests run (sampled)."""
    import os
    import threading

    seen: set[str] = set()
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as handle:
                            seen.add(handle.read().replace(b"\0", b" ").decode(errors="replace"))
                    except OSError:
                        pass
            stop.wait(0.3)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    yield seen
    stop.set()
    thread.join()
