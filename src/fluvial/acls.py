"""Least-privilege ACLs of a fluvial application, derived from its topology.

``fluvial acls APP.py --principal User:NAME`` prints them and ``--apply`` creates them. Before
an application starts against a secured cluster, :func:`check_access` asks the brokers which
operations its principal may perform on its topics and groups, so a missing ACL stops it at
once with every rule to add, before anything is consumed or committed. What cannot be asked
about is asked of a name under the rule's prefix that is never used (a transactional id, an
internal topic before the first start creates them); the internal topics' READ and WRITE,
which a first start cannot tell apart from DESCRIBE, are checked again once they exist.

The egress sinks an APP.py declares (``egress = [PostgresSink(...)]``) run in the same
process, under the same principal unless they name settings of their own: their rules are
part of the application's, and :func:`check_sink_access` checks them before they start.

An ACL that goes missing while the application runs (or that the start could not check) shows
up as a failure inside a worker; :func:`authorization_error` turns it into the same clear,
fatal :class:`~fluvial.kafka.security.AuthorizationError`, which engines never retry.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fluvial.config import StreamsConfig, to_millis
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.security import AuthorizationError, is_secured, principal_of
from fluvial.topology.topology import Topology

#: How long a diagnosis of a failure may ask the brokers before it gives up.
DIAGNOSIS_TIMEOUT_S = 10.0


@dataclass(frozen=True, order=True)
class AclRule:
    """One ALLOW rule: ``principal`` may do ``operation`` on a resource."""

    resource_type: str  # TOPIC, GROUP or TRANSACTIONAL_ID
    pattern: str  # LITERAL or PREFIXED
    name: str
    operation: str  # READ, WRITE, CREATE, DELETE, DESCRIBE, DESCRIBE_CONFIGS, ALTER_CONFIGS
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
    # One prefix covers the driver's id ("<application_id>-driver", fluvial.runtime.epoch) and
    # the slots' ("<application_id>-slot-<N>", fluvial.runtime.client_calls.transactional_id).
    return f"{config.application_id}-"


def driver_group(config: StreamsConfig) -> str:
    """The group whose offset metadata holds the driver's epoch (fluvial.runtime.epoch)."""
    return f"{config.application_id}-driver"


def derive_acls(
    topology: Topology, config: StreamsConfig, egress: Sequence[Any] = ()
) -> list[AclRule]:
    """Every ALLOW rule the application and its ``egress`` sinks need, and no more.

    READ and WRITE imply DESCRIBE in Kafka, so DESCRIBE is only listed where nothing else is
    needed.
    """
    app_id = config.application_id
    internal = topology.internal_topics(
        app_id,
        additional_retention_ms=to_millis(config.windowstore_changelog_additional_retention_ms),
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
        why = "internal topics (repartition, changelog, the deployment record)"
        for operation in ("CREATE", "READ", "WRITE"):
            rules.add(AclRule("TOPIC", "PREFIXED", prefix, operation, why))
        if any(t.name.endswith("-repartition") for t in internal):
            why = "repartition records are deleted once committed (DeleteRecords)"
            rules.add(AclRule("TOPIC", "PREFIXED", prefix, "DELETE", why))
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
    rules.update(_transactional_rules(config))
    if config.exactly_once:
        rules.add(
            AclRule(
                "GROUP",
                "LITERAL",
                driver_group(config),
                "READ",
                "the driver's epoch: a newer driver of the application fences an older one",
            )
        )
    rules.update(egress_acls(egress))
    return _distinct(rules)


def egress_acls(sinks: Iterable[Any]) -> list[AclRule]:
    """What egress sinks (:class:`~fluvial.sinks.PostgresSink`) need of Kafka.

    Each reads its topics ``read_committed`` by manual assignment from offsets kept in
    PostgreSQL. Its consumer names the group ``fluvial-sink-SINK_ID`` but never commits to
    it, and only looks up the group's coordinator, which needs DESCRIBE (as the restore
    consumers do). Bad rows go to its dead-letter topic, through an idempotent producer.
    """
    rules: set[AclRule] = set()
    for sink in sinks:
        who = f"egress sink {sink.sink_id!r}"
        for topic in sink.topics:
            rules.add(AclRule("TOPIC", "LITERAL", topic, "READ", f"{who} reads it"))
        rules.add(
            AclRule("GROUP", "LITERAL", sink.group_id, "DESCRIBE", f"{who}: its consumer's group")
        )
        if sink.dead_letter_topic:
            why = f"{who}: dead letters"
            rules.add(AclRule("TOPIC", "LITERAL", sink.dead_letter_topic, "WRITE", why))
    return _distinct(rules)


def _distinct(rules: Iterable[AclRule]) -> list[AclRule]:
    """One rule per resource and operation (the first reason of several), sorted."""
    chosen: dict[tuple[str, str, str, str], AclRule] = {}
    for rule in sorted(rules):
        chosen.setdefault((rule.resource_type, rule.pattern, rule.name, rule.operation), rule)
    return list(chosen.values())


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

    rules = list(rules)
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
    rule_of = dict(zip(bindings, rules, strict=True))  # errors name the rule, as it was given
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings})
    for binding, future in admin.create_acls(bindings, request_timeout=30).items():
        rule = rule_of[binding]
        try:
            future.result()
        except Exception as error:  # noqa: BLE001 - re-raised with the rule named
            raise FluvialError(
                f"could not create ACL {rule.operation} on {rule.resource_type} "
                f"{rule.name!r} for {principal}: {error}; the admin client settings must "
                "belong to a super-user or a principal allowed to ALTER the cluster"
            ) from None
    return len(bindings)


def check_access(topology: Topology, config: StreamsConfig) -> None:
    """Stop with the missing rules if the principal cannot do what the topology needs.

    Asks the brokers for the operations the principal is authorized for on each existing
    topic and on each group (Kafka's ``include_authorized_operations``): any principal may ask
    this of what it may describe, so no admin rights are needed.
    """
    missing = missing_acls(topology, config)
    if missing:
        raise AuthorizationError(_explain_for_app(config, missing))


def check_internal_topic_access(topology: Topology, config: StreamsConfig) -> None:
    """:func:`check_access` of the internal topics' rules again, once the topics exist."""
    internal = _internal_topic_names(topology, config)
    if not internal:
        return
    rules = [r for r in derive_acls(topology, config) if r.pattern == "PREFIXED"]
    rules = [r for r in rules if r.resource_type == "TOPIC"]
    missing = _missing(rules, internal, config.bootstrap_servers, config.client_config)
    if missing:
        raise AuthorizationError(_explain_for_app(config, missing))


def check_sink_access(sinks: Iterable[Any]) -> None:
    """Before sinks start (an APP.py's egress, ``fluvial sink postgres``): on a secured
    cluster, check each one's credentials, then the rules of :func:`egress_acls` under its own
    settings (an egress sink's are the application's once bound), so that a wrong password or
    a missing ACL stops it at once with what to fix."""
    from fluvial.kafka.security import check_connection

    for sink in sinks:
        check_connection(sink.bootstrap_servers, sink.client_config)
        if not is_secured(sink.client_config):
            continue
        missing = _missing(egress_acls([sink]), set(), sink.bootstrap_servers, sink.client_config)
        if missing:
            raise AuthorizationError(
                _explain(
                    missing,
                    subject=f"egress sink {sink.sink_id!r}",
                    bootstrap=sink.bootstrap_servers,
                    client_config=sink.client_config,
                    fix="Create them as an admin (fluvial acls APP.py --principal "
                    f"{principal_of(sink.client_config) or 'PRINCIPAL'} --apply covers the "
                    "egress sinks an APP.py declares)",
                )
            )


@dataclass(frozen=True)
class Missing:
    """A rule the principal lacks, for the resource ``name`` (``unseen``: it cannot even see it)."""

    rule: AclRule
    name: str
    unseen: bool = False


def missing_acls(
    topology: Topology, config: StreamsConfig, *, timeout_s: float = 30.0
) -> list[Missing]:
    """The topic and group rules of :func:`derive_acls` that the principal lacks."""
    internal = _internal_topic_names(topology, config)
    return _missing(
        derive_acls(topology, config), internal, config.bootstrap_servers, config.client_config,
        timeout_s=timeout_s,
    )  # fmt: skip


def _internal_topic_names(topology: Topology, config: StreamsConfig) -> set[str]:
    return {
        t.name
        for t in topology.internal_topics(
            config.application_id,
            additional_retention_ms=to_millis(config.windowstore_changelog_additional_retention_ms),
        )
    }


def _missing(
    rules: list[AclRule],
    internal: set[str],
    bootstrap: str,
    client_config: Mapping[str, Any],
    *,
    timeout_s: float = 30.0,
) -> list[Missing]:
    """The topic and group ``rules`` the principal lacks; ``internal``: the topics a prefixed
    rule stands for."""
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, **client_config})
    existing = set(admin.list_topics(timeout=min(15.0, timeout_s)).topics)
    literal = {r.name for r in rules if r.resource_type == "TOPIC" and r.pattern == "LITERAL"}
    topics = sorted((literal | internal) & existing)
    # A topic the principal may not even DESCRIBE is missing from the metadata it sees.
    unseen = sorted(literal - existing)
    allowed: dict[str, set[str]] = {}
    if topics:
        futures = admin.describe_topics(
            TopicCollection(topics), include_authorized_operations=True, request_timeout=timeout_s
        )
        for name, future in futures.items():
            try:
                ops = future.result().authorized_operations
            except KafkaException as error:
                if "AUTHORIZATION" not in error.args[0].name():
                    continue  # unknown (a broker away): judge only what the brokers said
                ops = []
            if ops is not None:
                allowed[name] = {op.name for op in ops}
    missing: list[Missing] = []
    for rule in rules:
        if rule.resource_type != "TOPIC":
            continue
        names = [rule.name] if rule.pattern == "LITERAL" else sorted(internal & existing)
        for name in names:
            if name in unseen:
                missing.append(Missing(rule, name, unseen=True))
            elif name in allowed and not _implied(rule.operation, allowed[name]):
                if rule.operation == "CREATE":
                    continue  # only needed while the topic does not exist
                missing.append(Missing(rule, name))
    if internal and not internal & existing:
        # A first start: no internal topic to ask about yet. Ask for each prefixed rule on a
        # topic name under the prefix that is never created.
        prefixed = [r for r in rules if r.resource_type == "TOPIC" and r.pattern == "PREFIXED"]
        for rule in prefixed:
            probe = f"{rule.name}{PROBE_SUFFIX}"
            if _refused(admin, rule.operation, probe, timeout_s):
                missing.append(Missing(rule, rule.name))
    for rule in rules:
        if rule.resource_type == "TRANSACTIONAL_ID" and _transactions_refused(
            bootstrap, client_config, f"{rule.name}{PROBE_SUFFIX}", timeout_s
        ):
            missing.append(Missing(rule, rule.name))
    for rule in rules:
        if rule.resource_type != "GROUP":
            continue
        try:
            [future] = admin.describe_consumer_groups(
                [rule.name], include_authorized_operations=True, request_timeout=timeout_s
            ).values()
            group_ops = {op.name for op in future.result().authorized_operations or []}
            if group_ops and not _implied(rule.operation, group_ops):
                missing.append(Missing(rule, rule.name))
        except KafkaException as error:
            if "AUTHORIZATION" in error.args[0].name():
                missing.append(Missing(rule, rule.name))
    return missing


#: Names under an application's prefixes that the start asks about and never creates.
PROBE_SUFFIX = "fluvial-acl-check"

_REFUSED = ("TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED")


def _refused(admin: Any, operation: str, topic: str, timeout_s: float) -> bool:
    """Whether the brokers refuse ``operation`` on ``topic``, a topic that does not exist: each
    request below is authorized before the topic is looked up, and none changes anything
    (validate-only, or about a topic that is not there). READ, WRITE and DELETE imply
    DESCRIBE, so a refused DESCRIBE means they are missing; a granted one cannot tell them
    apart until the topics exist (the start asks again then)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        if operation == "CREATE":
            futures = admin.create_topics(
                [NewTopic(topic, 1, 1)], validate_only=True, request_timeout=timeout_s
            )
        elif operation == "DESCRIBE_CONFIGS":
            futures = admin.describe_configs([resource], request_timeout=timeout_s)
        elif operation == "ALTER_CONFIGS":
            resource = ConfigResource(
                ResourceType.TOPIC, topic,
                incremental_configs=[
                    ConfigEntry("retention.ms", "-1", incremental_operation=AlterConfigOpType.SET)
                ],
            )  # fmt: skip
            futures = admin.incremental_alter_configs(
                [resource], validate_only=True, request_timeout=timeout_s
            )
        else:
            from confluent_kafka import TopicCollection

            futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout_s)
        for future in futures.values():
            future.result()
    except KafkaException as error:
        return error.args[0].name() in _REFUSED
    return False


def _transactions_refused(
    bootstrap: str, client_config: Mapping[str, Any], transactional_id: str, timeout_s: float
) -> bool:
    """Whether the brokers refuse a transactional id under the rule's prefix (one that the
    application never uses, so that no producer of its own is fenced by the question)."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, **client_config, "transactional.id": transactional_id,
         "log_level": 0}  # a refusal is reported here, not logged as a fatal error
    )  # fmt: skip
    try:
        producer.init_transactions(timeout_s)
    except KafkaException as error:
        return error.args[0].name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    return False


def _transactional_rules(config: StreamsConfig) -> list[AclRule]:
    """The rule that covers the application's transactional ids (exactly-once only)."""
    if not config.exactly_once:
        return []
    return [
        AclRule(
            "TRANSACTIONAL_ID",
            "PREFIXED",
            transactional_id_prefix(config),
            "WRITE",
            "exactly-once: the driver's and each worker slot's transactional ids",
        )
    ]


def _explain_for_app(
    config: StreamsConfig, missing: list[Missing], *, while_running: str = ""
) -> str:
    principal = principal_of(config.client_config) or "this client's principal"
    return _explain(
        missing, subject=f"application {config.application_id!r}",
        bootstrap=config.bootstrap_servers, client_config=config.client_config,
        while_running=while_running,
        fix=f"Create them as an admin: fluvial acls APP.py --principal {principal} --apply "
        "--client-config ADMIN.properties",
    )  # fmt: skip


def _explain(
    missing: list[Missing],
    *,
    subject: str,
    bootstrap: str,
    client_config: Mapping[str, Any],
    fix: str,
    while_running: str = "",
) -> str:
    principal = principal_of(client_config) or "this client's principal"
    lines = []
    for m in missing:
        kind = m.rule.resource_type.lower().replace("_", " ")
        note = (
            "; this principal cannot see the topic: no ACL lets it describe it, or it does not "
            "exist"
            if m.unseen
            else ""
        )
        lines.append(
            f"  {m.rule.operation} on {kind} {m.name!r} ({m.rule.why}{note}): "
            f"add  {m.rule.line(principal).split('  #')[0]}"
        )
    return (
        f"{principal} is not authorized for what {subject} needs on {bootstrap}"
        f"{while_running}:\n" + "\n".join(lines) + "\n" + fix
    )


#: Kafka errors that mean "the authorizer said no".
AUTHORIZATION_ERRORS = (
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
)


def authorization_error(
    topology: Topology, config: StreamsConfig, failure: BaseException, *, running: bool = True
) -> AuthorizationError | None:
    """The clear, fatal error for a failure that a missing ACL caused; ``None`` for any other.

    Kafka's error rarely names the resource (a transaction whose records the broker refused
    fails as "N message(s) failed delivery"), so the principal's rights are asked of the
    brokers, as at start, to name every missing rule. A failure that only hides a refusal (a
    delivery failure, a timeout) counts as one on a secured cluster, and only if that shows a
    rule missing.
    """
    if isinstance(failure, AuthorizationError):
        return failure
    text = _chain_text(failure)
    lowered = text.lower()
    denied = any(code in text for code in AUTHORIZATION_ERRORS) or "authorization failed" in lowered
    # A refused produce also surfaces as the records the aborted transaction purged.
    hidden = is_secured(config.client_config) and any(
        marker in lowered
        for marker in ("failed delivery", "timed out", "purged", "could not be produced")
    )
    if not denied and not hidden:
        return None
    try:
        missing = missing_acls(topology, config, timeout_s=DIAGNOSIS_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - the diagnosis is best effort; the failure stands
        missing = []
    if (
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in text
        or "transactional id authorization" in lowered
    ):
        known = {m.rule for m in missing}
        missing += [Missing(r, r.name) for r in _transactional_rules(config) if r not in known]
    if missing:
        found = " (found while running)" if running else ""
        return AuthorizationError(_explain_for_app(config, missing, while_running=found))
    if not denied:
        return None
    principal = principal_of(config.client_config) or "this client's principal"
    first = text.splitlines()[0] if text else repr(failure)
    return AuthorizationError(
        f"{principal} was refused by Kafka's authorizer "
        f"{'while running' if running else 'starting'} application {config.application_id!r} "
        f"on {config.bootstrap_servers}: {first[:500]}. See the ACLs it needs with: fluvial "
        f"acls APP.py --principal {principal} (add --apply, as an admin, to create them)"
    )


def _chain_text(failure: BaseException) -> str:
    """Every message of an exception and its causes, the Kafka error names included."""
    parts: list[str] = []
    seen: BaseException | None = failure
    while seen is not None and len(parts) < 10:
        if seen.args and hasattr(seen.args[0], "name") and hasattr(seen.args[0], "str"):
            parts.append(f"{seen.args[0].name()}: {seen.args[0].str()}")  # a KafkaError
        else:
            parts.append(str(seen))
        seen = seen.__cause__ or seen.__context__
    return "\n".join(p for p in parts if p)


def _implied(operation: str, allowed: set[str]) -> bool:
    if operation == "DESCRIBE" and allowed & {"READ", "WRITE", "DELETE", "ALTER"}:
        return True  # Kafka: these imply DESCRIBE
    return "ALL" in allowed or operation in allowed
