"""Internal topics: partition counts, configs, creation, and the co-partitioning check.

Runs in the driver before any task starts, so a missing source topic or a co-partitioning
mistake is reported before anything is consumed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from fluvial.acls import check_access, check_internal_topic_access
from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import ConfigError, TopologyError
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.diagnose import check_client_keys, check_reachable
from fluvial.kafka.security import check_connection, is_secured
from fluvial.runtime.clients import admin_settings
from fluvial.runtime.commit_metadata import check_commit_metadata
from fluvial.runtime.deployments import DeploymentPolicy, commit_deployment, plan_deployment
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicPlan:
    """Partition count of every topic the application reads or owns."""

    partitions: dict[str, int]
    internal: list[TopicSpec]
    #: The topology to run: internal topics carried over from the last deployment applied.
    topology: Topology | None = None


def existing_partition_counts(admin: AdminClient, topics: list[str]) -> dict[str, int]:
    metadata = admin.list_topics(timeout=15)
    counts = {}
    for name in topics:
        topic = metadata.topics.get(name)
        if topic is not None and topic.error is None and topic.partitions:
            counts[name] = len(topic.partitions)
    return counts


def plan_topics(topology: Topology, config: StreamsConfig, admin: AdminClient) -> TopicPlan:
    """Work out every internal topic's partition count from the user topics it follows."""
    app_id = config.application_id
    sources = topology.source_topics()
    internal = topology.internal_topics(
        app_id,
        additional_retention_ms=to_millis(config.windowstore_changelog_additional_retention_ms),
    )
    known = existing_partition_counts(admin, sources + [t.name for t in internal])
    missing = [t for t in sources if t not in known]
    if missing:
        raise ConfigError(
            f"source topic(s) {', '.join(missing)} do not exist on {config.bootstrap_servers}: "
            "create them first (fluvial never creates user topics)"
        )
    partitions = {t: known[t] for t in sources}
    pending = list(internal)
    # Internal topics may follow other internal topics (a changelog follows its repartition
    # source), so resolve in rounds until nothing is left.
    while pending:
        progressed = False
        for topic in list(pending):
            if topic.num_partitions is not None:
                count = topic.num_partitions
            elif topic.follows and all(f in partitions for f in topic.follows):
                count = max(partitions[f] for f in topic.follows)
            elif not topic.follows:
                count = 1
            else:
                continue
            partitions[topic.name] = count
            pending.remove(topic)
            progressed = True
        if not progressed:
            names = ", ".join(t.name for t in pending)
            raise TopologyError(f"cannot work out partition counts of internal topics: {names}")
    for topic in internal:
        have = known.get(topic.name)
        if have is not None and have != partitions[topic.name]:
            raise ConfigError(
                f"internal topic {topic.name!r} has {have} partitions but needs "
                f"{partitions[topic.name]}: run 'fluvial reset {app_id}' to recreate it"
            )
    _check_copartitioning(topology, app_id, partitions)
    check_commit_metadata(topology, config, partitions)  # now with the writers of each task
    check_output_topics(topology, config, admin,
                        hint_partitions=max((partitions[t] for t in sources), default=1))  # fmt: skip
    specs = [
        TopicSpec(
            t.name,
            partitions[t.name],
            replication_factor=config.replication_factor,
            config=dict(t.configs),
        )
        for t in internal
    ]
    return TopicPlan(partitions, specs)


def check_output_topics(
    topology: Topology, config: StreamsConfig, admin: AdminClient, *, hint_partitions: int = 1
) -> None:
    """Refuse to start when a topic the application writes does not exist.

    A broker that creates topics on first use would make it with its default partition count
    and settings, in silence; a broker that does not would fail the first commit.
    """
    outputs = topology.sink_topics()
    if not outputs:
        return
    known = existing_partition_counts(admin, outputs)
    missing = [t for t in outputs if t not in known]
    if missing:
        raise ConfigError(missing_topics_message(missing, config.bootstrap_servers,
                                                 hint_partitions, what="output topic"))  # fmt: skip


def missing_topics_message(
    missing: list[str], bootstrap_servers: str, partitions: int | None, *, what: str
) -> str:
    """Names the missing topics and the command that creates each (with ``partitions``, or
    N for the user to choose)."""
    plural = "s" if len(missing) > 1 else ""
    verb = "do" if len(missing) > 1 else "does"
    count = "N" if partitions is None else str(partitions)
    commands = "; ".join(f"fluvial topics create {name} --partitions {count}" for name in missing)
    return (
        f"{what}{plural} {', '.join(repr(t) for t in missing)} {verb} not exist on "
        f"{bootstrap_servers}: create {'them' if plural else 'it'} first with: {commands} "
        "(fluvial never creates a user topic, so its partitions and settings stay yours)"
    )


def _check_copartitioning(topology: Topology, app_id: str, partitions: dict[str, int]) -> None:
    for group in topology.copartition_groups(app_id):
        counts = {t: partitions[t] for t in sorted(group) if t in partitions}
        if len(set(counts.values())) > 1:
            detail = ", ".join(f"'{t}' has {n}" for t, n in counts.items())
            raise TopologyError(
                f"topics joined together must be co-partitioned, but {detail} partitions: "
                "give them equal partition counts, or repartition one side first"
            )


def ensure_internal_topics(
    topology: Topology, config: StreamsConfig, deployment: DeploymentPolicy | None = None
) -> TopicPlan:
    """Plan and create the internal topics (existing ones are kept); the plan's ``topology`` is
    the one to run.

    Against a secured cluster, first check the credentials and the principal's ACLs, so
    either mistake stops the application at once with a clear error. Then, before anything is
    created, compare the deployment with the last one (:mod:`fluvial.runtime.deployments`):
    a change that would leave committed state behind stops here, unless ``deployment`` says
    the loss is intended.
    """
    check_client_keys(config.client_config)
    check_connection(config.bootstrap_servers, config.client_config)
    if is_secured(config.client_config):
        check_access(topology, config)
    else:
        check_reachable(config.bootstrap_servers, config.client_config)
    admin = AdminClient(admin_settings(config))
    prepared = plan_deployment(topology, config, deployment, admin)
    topology = prepared.topology
    plan = plan_topics(topology, config, admin)
    create_topics(config.bootstrap_servers, plan.internal, admin_config=config.client_config)
    if is_secured(config.client_config):
        check_internal_topic_access(topology, config)  # what a first start could not ask
    reconcile_time_retention(admin, plan.internal)
    commit_deployment(prepared, config)  # the topics it names exist now
    return replace(plan, topology=topology)


# Settings of a time-retained changelog that an existing topic must be brought up to.
_TIMESTAMP_TYPE = "message.timestamp.type"
_RETENTION = "retention.ms"


def reconcile_time_retention(admin: AdminClient, specs: list[TopicSpec]) -> None:
    """Bring existing window and session changelogs up to the settings they need.

    Topics created before append-time stamps (or by hand) may still expire records by their
    event time, and an application whose ``windowstore_changelog_additional_retention_ms`` was
    raised needs the longer retention on topics that already exist. Retention is only ever
    raised here: lowering it could delete records a store still needs.
    """
    wanted = {s.name: s.config for s in specs if s.config.get(_TIMESTAMP_TYPE)}
    if not wanted:
        return
    resources = [ConfigResource(ResourceType.TOPIC, name) for name in sorted(wanted)]
    for resource, future in admin.describe_configs(resources, request_timeout=30).items():
        current = future.result(timeout=60)
        name = resource.name
        changes = []
        have_type = current[_TIMESTAMP_TYPE].value if _TIMESTAMP_TYPE in current else None
        if have_type != wanted[name][_TIMESTAMP_TYPE]:
            changes.append((_TIMESTAMP_TYPE, wanted[name][_TIMESTAMP_TYPE]))
        have_retention = int(current[_RETENTION].value) if _RETENTION in current else -1
        need_retention = int(wanted[name][_RETENTION])
        if 0 <= have_retention < need_retention:
            changes.append((_RETENTION, str(need_retention)))
        if not changes:
            continue
        log.info("changelog %s: setting %s", name, ", ".join(f"{k}={v}" for k, v in changes))
        entries = [
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
            for key, value in changes
        ]
        target = ConfigResource(ResourceType.TOPIC, name, incremental_configs=entries)
        for done in admin.incremental_alter_configs([target]).values():
            done.result(timeout=60)
