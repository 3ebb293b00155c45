"""``fluvial topics delete``: delete topics, but not from under a running application.

An application's internal topics (``<application_id>-<name>-repartition``, ``-changelog``, a
foreign-key join's subscription topics) hold its state and the records between its
sub-topologies. Deleting one while the application runs breaks it, and its committed offsets
then point past state that is gone. So an internal topic is deleted only when its application
is not seen running, or with ``force``. An application is seen running when

- its consumer group (``<application_id>``) or its driver's (``<application_id>-driver``) has
  live members, as any subscribed client's group does; or
- its driver record (exactly-once: the driver's epoch, committed to the driver's group) names
  a ``fluvial`` process on this host that is still alive. fluvial's own consumers are
  assigned, never subscribed, so a running fluvial application has no group members.

A driver on another host cannot be seen from here, nor a running application under
at-least-once (it keeps no driver record): stop those first.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka.admin import AdminClient

from fluvial.errors import FluvialError
from fluvial.kafka.diagnose import kafka_logger
from fluvial.runtime.reset import name_part, wait_until_gone

DRIVER_SUFFIX = "-driver"


def delete_topics(
    bootstrap_servers: str,
    settings: Mapping[str, str],
    names: Sequence[str],
    *,
    force: bool = False,
) -> list[str]:
    """Delete ``names`` and wait until they are gone; return them.

    Nothing is deleted if one of them does not exist, or (without ``force``) is an internal
    topic of an application seen running.
    """
    config: dict[str, Any] = {"bootstrap.servers": bootstrap_servers, **settings,
                              "logger": kafka_logger()}  # fmt: skip
    admin = AdminClient(config)
    names = list(dict.fromkeys(names))
    existing = set(admin.list_topics(timeout=15).topics)
    missing = [name for name in names if name not in existing]
    if missing:
        raise FluvialError(
            f"no topic {', '.join(map(repr, missing))} on {bootstrap_servers}: fluvial topics "
            "list shows those that exist; nothing was deleted"
        )
    if not force:
        refusals = [why for name in names if (why := _running_owner(admin, name))]
        if refusals:
            raise FluvialError("\n".join(refusals) + "\nNothing was deleted.")
    for name, future in admin.delete_topics(names, operation_timeout=30).items():
        try:
            future.result()
        except KafkaException as error:
            raise FluvialError(f"could not delete topic {name!r}: {error.args[0].str()}") from None
    wait_until_gone(admin, set(names))
    return names


def _running_owner(admin: AdminClient, topic: str) -> str | None:
    """Why ``topic`` must not be deleted now: the application owning it runs; else None."""
    for application_id in _owners(admin, topic):
        running = seen_running(admin, application_id)
        if running is not None:
            how, stop = running
            return (
                f"refusing to delete {topic!r}: it is an internal topic of application "
                f"{application_id!r}, which is running ({how}). Stop the application first "
                f"({stop}); 'fluvial reset {application_id}' then deletes its internal topics "
                "with its committed offsets, so that it starts afresh. --force deletes the topic "
                "anyway: the running application fails, or loses that state."
            )
    return None


def _owners(admin: AdminClient, topic: str) -> list[str]:
    """Application ids that have a group and whose internal topic ``topic`` could be."""
    try:
        groups = admin.list_consumer_groups(request_timeout=15).result().valid
    except KafkaException as error:
        raise FluvialError(
            f"cannot list consumer groups to check whether {topic!r} belongs to a running "
            f"application: {error.args[0].str()}"
        ) from None
    ids = {g.group_id.removesuffix(DRIVER_SUFFIX) for g in groups}
    return sorted(app for app in ids if name_part(app, topic) is not None)


def seen_running(admin: AdminClient, application_id: str) -> tuple[str, str] | None:
    """(how the application is seen running, how to stop it), or None."""
    groups = [application_id, application_id + DRIVER_SUFFIX]
    for group, future in admin.describe_consumer_groups(groups, request_timeout=15).items():
        try:
            members = future.result().members
        except KafkaException:
            continue  # no such group
        if members:
            hosts = sorted({m.host for m in members})
            return (
                f"its group {group!r} has {len(members)} live member(s), on {', '.join(hosts)}",
                "stop its instances: Ctrl-C or SIGTERM to each",
            )
    driver_group = application_id + DRIVER_SUFFIX
    record = _driver_record(admin, driver_group)
    if record is not None and record.host == socket.gethostname() and _is_fluvial(record.pid):
        return (
            f"the driver that its group {driver_group!r} records, {record.describe()}, is "
            "alive on this host",
            f"Ctrl-C in its terminal, or kill {record.pid}",
        )
    return None


def _driver_record(admin: AdminClient, group: str) -> Any:
    from fluvial.runtime.epoch import DriverRecord

    request = [ConsumerGroupTopicPartitions(group)]
    try:
        committed = admin.list_consumer_group_offsets(request)[group].result()
    except KafkaException:
        return None
    for partition in committed.topic_partitions or []:
        record = DriverRecord.decode(partition.metadata)
        if record is not None:
            return record
    return None


def _is_fluvial(pid: int) -> bool:
    """Whether ``pid`` is alive here and (where /proc tells) runs fluvial, not a reused pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return b"fluvial" in cmdline.read_bytes()
    except FileNotFoundError:
        return not Path("/proc").is_dir()
    except OSError:
        return True
