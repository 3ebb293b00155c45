"""Small admin helpers over confluent-kafka: create topics and wait for them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from fluvial.errors import FluvialError


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int = 1
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    config: dict[str, str] = field(default_factory=dict)


def admin_client(bootstrap_servers: str, **extra: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers, **extra})


def create_topics(
    bootstrap_servers: str,
    specs: list[TopicSpec],
    *,
    timeout_s: float = 30.0,
    exist_ok: bool = True,
    admin_config: dict[str, str] | None = None,
) -> None:
    """Create topics and wait until every partition has a leader.

    Existing topics are accepted when ``exist_ok``; their partition count is not changed.
    """
    if not specs:
        return
    admin = admin_client(bootstrap_servers, **(admin_config or {}))
    for attempt in range(5):
        try:
            _create(admin, specs, timeout_s, exist_ok)
            break
        except _Transient:
            if attempt == 4:
                raise FluvialError(
                    f"could not create topics {[s.name for s in specs]}: the cluster did not "
                    "answer in time (is a broker down?)"
                ) from None
            time.sleep(1.0 + attempt)
    _wait_for_leaders(admin, {s.name: s.partitions for s in specs}, timeout_s)


class _Transient(Exception):
    """A controller or broker that did not answer in time: worth another try."""


def _create(admin: AdminClient, specs: list[TopicSpec], timeout_s: float, exist_ok: bool) -> None:
    new = [
        NewTopic(s.name, num_partitions=s.partitions, replication_factor=s.replication_factor,
                 config=dict(s.config))
        for s in specs
    ]  # fmt: skip
    for name, future in admin.create_topics(new, request_timeout=timeout_s).items():
        try:
            future.result()
        except KafkaException as error:
            if exist_ok and error.args[0].name() == "TOPIC_ALREADY_EXISTS":
                continue
            if error.args[0].retriable() or "Timed out" in error.args[0].str():
                raise _Transient() from error
            if error.args[0].name() in (
                "TOPIC_AUTHORIZATION_FAILED",
                "CLUSTER_AUTHORIZATION_FAILED",
            ):
                raise FluvialError(
                    f"not authorized to create topic {name!r}: the client's principal needs "
                    "CREATE on the topic (or a prefix of it); for an application's internal "
                    "topics, fluvial acls APP.py --principal User:NAME lists the rule"
                ) from None
            raise FluvialError(f"could not create topic {name!r}: {error.args[0].str()}") from None


def _wait_for_leaders(admin: AdminClient, expected: dict[str, int], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    missing: list[str] = list(expected)
    while time.monotonic() < deadline:
        try:
            metadata = admin.list_topics(timeout=5)
        except KafkaException as error:
            if error.args[0].retriable() or "Timed out" in error.args[0].str():
                time.sleep(0.5)  # a slow answer is not a missing topic: ask again
                continue
            raise
        missing = []
        for name in expected:
            topic = metadata.topics.get(name)
            if (
                topic is None
                or topic.error is not None
                or not topic.partitions
                or any(p.leader < 0 for p in topic.partitions.values())
            ):
                missing.append(name)
        if not missing:
            return
        time.sleep(0.1)
    raise FluvialError(f"topics without partition leaders after {timeout_s:.0f} s: {missing}")
