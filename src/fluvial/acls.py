"""Least-privilege ACLs of a fluvial application, derived from its topology.

``fluvial acls APP.py --principal User:NAME`` prints them and ``--apply`` creates them. Before
an application starts against a secured cluster, :func:`check_access` asks the brokers which
operations its principal may perform on its topics and group, so a missing ACL stops it at
once with the rule to add, before anything is consumed or committed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.security import KafkaSecurityError, principal_of
from fluvial.topology.topology import Topology


@dataclass(frozen=True, order=True)
class AclRule:
    """One ALLOW rule: ``principal`` may do ``operation`` on a resource."""

    resource_type: str  # TOPIC, GROUP or TRANSACTIONAL_ID
    pattern: str  # LITERAL or PREFIXED
    name: str
    operation: str  # READ, WRITE, CREATE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
    why: str

    def line(self, principal: str) -> str:
        return (
            f"ALLOW {principal} {self.operation:<16} {self.resource_type:<16} "
            f"{self.pattern:<8} {self.name}  # {self.why}"
        )

    def kafka_acls_command(self, principal: str) -> str:
        """The same rule for Kafka's own ``kafka-acls.sh``."""
        flag = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
        operation = "".join(p.capitalize() for p in self.operation.split("_"))
        return (
            f"kafka-acls.sh --bootstrap-server BOOTSTRAP --command-config ADMIN.properties "
            f"--add --allow-principal {principal} --operation {operation} "
            f"{flag[self.resource_type]} {self.name} --resource-pattern-type "
            f"{self.pattern.lower()}"
        )


def internal_prefix(config: StreamsConfig) -> str:
    return f"{config.application_id}-"


def transactional_id_prefix(config: StreamsConfig) -> str:
    # fluvial.runtime.worker.transactional_id: one id per slot, "<application_id>-slot-<N>".
    return f"{config.application_id}-slot-"


def derive_acls(topology: Topology, config: StreamsConfig) -> list[AclRule]:
    """Every ALLOW rule the application needs, and no more.

    READ and WRITE imply DESCRIBE in Kafka, so DESCRIBE is only listed where nothing else is
    needed.
    """
    app_id = config.application_id
    internal = topology.internal_topics(
        app_id, additional_retention_ms=int(config.windowstore_changelog_additional_retention_ms)
    )
    prefix = internal_prefix(config)
    rules: set[AclRule] = set()
    for topic in topology.source_topics():
        rules.add(AclRule("TOPIC", "LITERAL", topic, "READ", "input"))
    for topic in topology.global_source_topics():
        rules.add(AclRule("TOPIC", "LITERAL", topic, "READ", "global table input"))
    for topic in topology.sink_topics():
        rules.add(AclRule("TOPIC", "LITERAL", topic, "WRITE", "output"))
    if config.dead_letter_topic:
        rules.add(AclRule("TOPIC", "LITERAL", config.dead_letter_topic, "WRITE", "dead letters"))
    if internal:
        why = "internal topics (repartition, changelog)"
        for operation in ("CREATE", "READ", "WRITE"):
            rules.add(AclRule("TOPIC", "PREFIXED", prefix, operation, why))
        if any(t.configs.get("message.timestamp.type") for t in internal):
            why = "window changelog retention is checked and raised at start"
            for operation in ("DESCRIBE_CONFIGS", "ALTER_CONFIGS"):
                rules.add(AclRule("TOPIC", "PREFIXED", prefix, operation, why))
    # The main consumer commits to the application's group. The restore consumers name the
    # group "<application_id>-restore-unused" and never commit to it, but a consumer with a
    # group looks up the group's coordinator, which needs DESCRIBE.
    rules.add(AclRule("GROUP", "LITERAL", app_id, "READ", "committed input offsets"))
    rules.add(
        AclRule("GROUP", "LITERAL", f"{app_id}-restore-unused", "DESCRIBE", "restore consumers")
    )
    if config.exactly_once:
        rules.add(
            AclRule(
                "TRANSACTIONAL_ID",
                "PREFIXED",
                transactional_id_prefix(config),
                "WRITE",
                "one transactional id per worker slot",
            )
        )
    return sorted(rules)


def parse_principal(principal: str) -> str:
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise ConfigError(f"principal {principal!r} must read TYPE:NAME, e.g. User:pageviews-app")
    return principal


def apply_acls(
    rules: Iterable[AclRule], principal: str, bootstrap: str, settings: dict[str, Any]
) -> int:
    """Create the rules (an existing identical rule is left as it is); return how many."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    bindings = [
        AclBinding(
            ResourceType[rule.resource_type],
            rule.name,
            ResourcePatternType[rule.pattern],
            principal,
            "*",
            AclOperation[rule.operation],
            AclPermissionType.ALLOW,
        )
        for rule in rules
    ]
    if not bindings:
        return 0
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    for binding, future in admin.create_acls(bindings, request_timeout=30).items():
        try:
            future.result()
        except Exception as error:  # noqa: BLE001 - re-raised with the rule named
            raise FluvialError(
                f"could not create ACL {binding.operation.name} on {binding.restype.name} "
                f"{binding.name!r} for {principal}: {error}; the admin client settings must "
                "belong to a super-user or a principal allowed to ALTER the cluster"
            ) from None
    return len(bindings)


def check_access(topology: Topology, config: StreamsConfig) -> None:
    """Stop with the missing rule if the principal cannot do what the topology needs.

    Asks the brokers for the operations the principal is authorized for on each existing
    topic and on the group (Kafka's ``include_authorized_operations``).
    """
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    principal = principal_of(config.client_config) or "this client's principal"
    rules = derive_acls(topology, config)
    admin = AdminClient({"bootstrap.servers": config.bootstrap_servers, **config.client_config})
    existing = set(admin.list_topics(timeout=15).topics)
    literal = {r.name for r in rules if r.resource_type == "TOPIC" and r.pattern == "LITERAL"}
    internal = {
        t.name
        for t in topology.internal_topics(
            config.application_id,
            additional_retention_ms=int(config.windowstore_changelog_additional_retention_ms),
        )
    }
    topics = sorted((literal | internal) & existing)
    # A topic the principal may not even DESCRIBE is missing from the metadata it sees.
    unseen = sorted(literal - existing)
    allowed: dict[str, set[str]] = {}
    if topics:
        futures = admin.describe_topics(
            TopicCollection(topics), include_authorized_operations=True, request_timeout=30
        )
        for name, future in futures.items():
            try:
                ops = future.result().authorized_operations
            except KafkaException:
                ops = []
            allowed[name] = {op.name for op in ops or []}
    missing: list[tuple[AclRule, str]] = []
    for rule in rules:
        if rule.resource_type != "TOPIC":
            continue
        names = [rule.name] if rule.pattern == "LITERAL" else sorted(internal & existing)
        for name in names:
            if name in unseen:
                missing.append((rule, name))
            elif name in allowed and not _implied(rule.operation, allowed[name]):
                if rule.operation == "CREATE":
                    continue  # only needed while the topic does not exist
                missing.append((rule, name))
    for rule in rules:
        if rule.resource_type != "GROUP":
            continue
        try:
            [future] = admin.describe_consumer_groups(
                [rule.name], include_authorized_operations=True, request_timeout=30
            ).values()
            group_ops = {op.name for op in future.result().authorized_operations or []}
            if group_ops and not _implied(rule.operation, group_ops):
                missing.append((rule, rule.name))
        except KafkaException as error:
            if "AUTHORIZATION" in error.args[0].name():
                missing.append((rule, rule.name))
    if missing:
        lines = [
            f"  {rule.operation} on {rule.resource_type.lower().replace('_', ' ')} {name!r} "
            f"({rule.why}{'; the topic is missing or invisible to it' if name in unseen else ''})"
            f": add  {rule.line(principal).split('  #')[0]}"
            for rule, name in missing
        ]
        raise KafkaSecurityError(
            f"{principal} is not authorized for what application {config.application_id!r} "
            "needs on " + config.bootstrap_servers + ":\n" + "\n".join(lines) + "\n"
            f"Create them as an admin: fluvial acls APP.py --principal {principal} --apply "
            "--client-config ADMIN.properties"
        )


def _implied(operation: str, allowed: set[str]) -> bool:
    if operation == "DESCRIBE" and allowed & {"READ", "WRITE", "DELETE", "ALTER"}:
        return True  # Kafka: these imply DESCRIBE
    return "ALL" in allowed or operation in allowed
