"""The application reset tool: reprocess from scratch.

Deletes the application's committed offsets (its consumer group, so every input is read again
from the earliest offset), its driver record, its internal topics, and its local state.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from fluvial.errors import FluvialError

INTERNAL_SUFFIXES = (
    "-repartition",
    "-changelog",
    "-subscription-registration-topic",
    "-subscription-response-topic",
)


@dataclass
class ResetReport:
    deleted_topics: list[str] = field(default_factory=list)
    group_deleted: bool = False
    state_wiped: Path | None = None


def reset_application(
    application_id: str,
    bootstrap_servers: str,
    state_dir: str | Path = "/tmp/fluvial",
    client_config: dict[str, str] | None = None,
) -> ResetReport:
    """Reset ``application_id``. Stop every instance of the application first."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, **(client_config or {})})
    report = ResetReport()
    groups = admin.describe_consumer_groups([application_id])
    try:
        group = groups[application_id].result()
        if group.members:
            raise FluvialError(
                f"application {application_id!r} still has {len(group.members)} active member(s): "
                "stop every instance before resetting it"
            )
    except KafkaException:
        pass  # no such group: nothing committed yet
    # The application's committed offsets, and its driver record (fluvial.runtime.epoch).
    for group in (application_id, f"{application_id}-driver"):
        try:
            admin.delete_consumer_groups([group])[group].result()
            report.group_deleted |= group == application_id
        except KafkaException as error:
            if error.args[0].name() not in ("GROUP_ID_NOT_FOUND", "NOT_COORDINATOR"):
                raise FluvialError(f"could not delete group {group!r}: {error}") from None
    prefix = f"{application_id}-"
    topics = sorted(
        name
        for name in admin.list_topics(timeout=15).topics
        if name.startswith(prefix) and name.endswith(INTERNAL_SUFFIXES)
    )
    if topics:
        for name, future in admin.delete_topics(topics, operation_timeout=30).items():
            try:
                future.result()
                report.deleted_topics.append(name)
            except KafkaException as error:
                raise FluvialError(f"could not delete internal topic {name!r}: {error}") from None
    _wait_until_gone(admin, set(report.deleted_topics))
    app_state = Path(state_dir) / application_id
    if app_state.exists():
        shutil.rmtree(app_state)
        report.state_wiped = app_state
    return report


def _wait_until_gone(admin: AdminClient, topics: set[str], timeout_s: float = 60.0) -> None:
    """Topic deletion is asynchronous; wait, so a rerun can create the topics afresh."""
    deadline = time.monotonic() + timeout_s
    while topics and time.monotonic() < deadline:
        if not topics & set(admin.list_topics(timeout=15).topics):
            return
        time.sleep(0.2)
