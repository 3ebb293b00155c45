"""The application reset tool: reprocess from scratch.

Deletes the application's committed offsets (its consumer group, so every input is read again
from the earliest offset), its driver record, its internal topics, and its local state.

Internal topics are named ``<application_id>-<name>-<suffix>``, so one application's id can be
the prefix of another's (``shop`` and ``shop-eu``): ``shop-eu-totals-changelog`` could be the
store ``eu-totals`` of ``shop`` or the store ``totals`` of ``shop-eu``. A reset must never
delete another application's state, which would then restart empty over its committed offsets
and go on with wrong results. So:

- given the application (``APP.py``), the exact names come from its topology;
- given only the id, a topic is deleted only when no other application's id can own it: its
  name part has no ``-``, or is a generated name (``KSTREAM-AGGREGATE-STATE-STORE-0000000003``).
  Any other candidate stops the reset before anything is deleted, and is listed.
"""

from __future__ import annotations

import re
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
# A foreign-key join's topics under generated names: KTABLE-FK-JOIN-SUBSCRIPTION-...-0000000007-topic
_GENERATED_FK_TOPIC = re.compile(r"^KTABLE-FK-JOIN-SUBSCRIPTION-[A-Z-]+-\d{10}-topic$")
# A name fluvial (and Kafka Streams) generate: a node or store prefix and a 10-digit index.
_GENERATED = re.compile(r"^(KSTREAM|KTABLE)-[A-Z-]+-\d{10}(-[a-z-]+)?$")


@dataclass
class ResetPlan:
    """What a reset deletes (or, under ``--dry-run``, would delete)."""

    application_id: str
    topics: list[str] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)
    state: Path | None = None


@dataclass
class ResetReport:
    deleted_topics: list[str] = field(default_factory=list)
    group_deleted: bool = False
    state_wiped: Path | None = None


def name_part(application_id: str, topic: str) -> str | None:
    """``<name>`` of ``<application_id>-<name><internal suffix>``, or None for other topics."""
    prefix = f"{application_id}-"
    if not topic.startswith(prefix):
        return None
    rest = topic[len(prefix) :]
    if _GENERATED_FK_TOPIC.match(rest):
        return rest[: -len("-topic")]
    for suffix in INTERNAL_SUFFIXES:
        if topic.endswith(suffix) and len(topic) > len(prefix) + len(suffix):
            return topic[len(prefix) : -len(suffix)]
    return None


def other_owner(application_id: str, topic: str) -> str | None:
    """An application id other than ``application_id`` that could own ``topic``, if any."""
    name = name_part(application_id, topic)
    if name is None or "-" not in name or _GENERATED.match(name):
        return None
    return f"{application_id}-{name.split('-', 1)[0]}"


def _admin(bootstrap_servers: str, client_config: dict[str, str] | None) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers, **(client_config or {})})


def plan_reset(
    application_id: str,
    bootstrap_servers: str,
    state_dir: str | Path = "/tmp/fluvial",
    client_config: dict[str, str] | None = None,
    *,
    internal_topics: list[str] | None = None,
) -> ResetPlan:
    """What resetting ``application_id`` deletes; raises before anything is deleted if the
    application still runs, or if another application could own a candidate topic.

    ``internal_topics``: the application's exact internal topic names (from its topology);
    without them, candidates are found by name and must be unambiguous.
    """
    admin = _admin(bootstrap_servers, client_config)
    refuse_if_running(admin, application_id)
    existing = set(admin.list_topics(timeout=15).topics)
    plan = ResetPlan(application_id)
    if internal_topics is not None:
        # Topics carried over from an earlier deployment (fluvial upgrade) are the app's too.
        from fluvial.config import StreamsConfig
        from fluvial.runtime.deployments import recorded_topics

        config = StreamsConfig(application_id=application_id,
                               bootstrap_servers=bootstrap_servers,
                               client_config=dict(client_config or {}))  # fmt: skip
        wanted = set(internal_topics) | set(recorded_topics(config))
        plan.topics = sorted(t for t in wanted if t in existing)
    else:
        candidates = sorted(t for t in existing if name_part(application_id, t) is not None)
        ambiguous = {t: owner for t in candidates if (owner := other_owner(application_id, t))}
        if ambiguous:
            listing = "\n  ".join(
                f"{t} (could be application {owner!r}'s)" for t, owner in ambiguous.items()
            )
            raise FluvialError(
                f"refusing to reset {application_id!r} by id: these topics could belong to "
                f"another application whose id starts with '{application_id}-', and deleting "
                f"them would empty its state:\n  {listing}\nReset with the application file "
                f"instead (fluvial reset APP.py), which names its exact topics; nothing was "
                "deleted"
            )
        from fluvial.runtime.deployments import deployments_topic

        record = deployments_topic(application_id)
        plan.topics = candidates + ([record] if record in existing else [])
    plan.groups = _existing_groups(admin, [application_id, f"{application_id}-driver"])
    app_state = Path(state_dir) / application_id
    plan.state = app_state if app_state.exists() else None
    return plan


def reset_application(
    application_id: str,
    bootstrap_servers: str,
    state_dir: str | Path = "/tmp/fluvial",
    client_config: dict[str, str] | None = None,
    *,
    internal_topics: list[str] | None = None,
) -> ResetReport:
    """Reset ``application_id``. Stop every instance of the application first."""
    plan = plan_reset(application_id, bootstrap_servers, state_dir, client_config,
                      internal_topics=internal_topics)  # fmt: skip
    return apply_reset(plan, bootstrap_servers, client_config)


def apply_reset(
    plan: ResetPlan, bootstrap_servers: str, client_config: dict[str, str] | None = None
) -> ResetReport:
    admin = _admin(bootstrap_servers, client_config)
    report = ResetReport()
    # The application's committed offsets, and its driver record (fluvial.runtime.epoch).
    for group in plan.groups:
        try:
            admin.delete_consumer_groups([group])[group].result()
            report.group_deleted |= group == plan.application_id
        except KafkaException as error:
            if error.args[0].name() not in ("GROUP_ID_NOT_FOUND", "NOT_COORDINATOR"):
                raise FluvialError(f"could not delete group {group!r}: {error}") from None
    if plan.topics:
        for name, future in admin.delete_topics(plan.topics, operation_timeout=30).items():
            try:
                future.result()
                report.deleted_topics.append(name)
            except KafkaException as error:
                raise FluvialError(f"could not delete internal topic {name!r}: {error}") from None
    wait_until_gone(admin, set(report.deleted_topics))
    if plan.state is not None and plan.state.exists():
        shutil.rmtree(plan.state)
        report.state_wiped = plan.state
    return report


def refuse_if_running(admin: AdminClient, application_id: str, doing: str = "resetting") -> None:
    """Refuse while the application runs: its group has live members, or (fluvial's slots are
    assigned partitions, not group members) its driver record names a live process here."""
    from fluvial.kafka.deletion import seen_running

    running = seen_running(admin, application_id)
    if running is not None:
        how, stop = running
        raise FluvialError(
            f"application {application_id!r} is running ({how}): stop every instance before "
            f"{doing} it ({stop})"
        )


def _existing_groups(admin: AdminClient, wanted: list[str]) -> list[str]:
    try:
        listed = admin.list_consumer_groups(request_timeout=15).result()
    except KafkaException:
        return list(wanted)  # cannot list: try to delete each, absent ones are skipped
    present = {g.group_id for g in listed.valid}
    return [g for g in wanted if g in present]


def wait_until_gone(admin: AdminClient, topics: set[str], timeout_s: float = 60.0) -> None:
    """Topic deletion is asynchronous; wait, so a rerun can create the topics afresh."""
    deadline = time.monotonic() + timeout_s
    while topics and time.monotonic() < deadline:
        if not topics & set(admin.list_topics(timeout=15).topics):
            return
        time.sleep(0.2)
