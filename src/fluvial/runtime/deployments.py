"""Deployments: a new version of a topology never drops committed state in silence.

Each start of an application compares its stateful layout (:mod:`fluvial.topology.layout`)
with the layout the last deployment recorded in Kafka, in the compacted topic
``<application_id>-fluvial-deployments``, before any topic is created:

- a store or repartition topic of the last deployment that this one no longer uses, and that
  still holds something (changelog records; repartition records not consumed yet), stops the
  start with one message naming it, the new name it most likely moved to, and the ways on:
  ``fluvial upgrade APP.py`` to carry it over, naming the operator, or
  ``--allow-state-loss NAME`` / ``fluvial reset`` when losing it is intended;
- ``fluvial upgrade`` maps each new generated name whose signature matches exactly one old
  resource (and that resource exactly one new one) onto the old topic. The mapping is stored
  with the deployment record, so nothing is copied: later starts keep using the old topic under
  the new name. Two alike candidates are refused, never guessed;
- an internal topic that the last deployment used, or whose sub-topology has committed offsets,
  and that is missing now is never recreated empty: the start is refused, naming it;
- ``ensure_explicit_internal_resource_naming`` refuses every generated store or repartition
  name before anything else.

Without a record (an application first started by an older fluvial) the application's internal
topics found in Kafka stand in for it: they can be refused, but not matched.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError, StateLossError, TopologyError
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.consumed import ConsumedMessage, consume
from fluvial.processor.completeness import PROGRESS_HEADER, WRITER_HEADER
from fluvial.runtime.client_calls import TRANSIENT_ERRORS
from fluvial.runtime.clients import admin_settings, consumer_settings, producer_settings
from fluvial.runtime.commit_metadata import CommitMetadata
from fluvial.topology.layout import (
    REPARTITION,
    STORE,
    Resource,
    default_topic,
    layout_of,
    naming_hint,
)
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)
T = TypeVar("T")

DEPLOYMENTS_SUFFIX = "fluvial-deployments"
RECORD_KEY = b"layout"
RECORD_VERSION = 1
TIMEOUT_S = 30.0
#: How many records of a repartition partition a check reads past its committed offset.
SCAN_LIMIT = 100_000


def deployments_topic(application_id: str) -> str:
    return f"{application_id}-{DEPLOYMENTS_SUFFIX}"


@dataclass(frozen=True)
class DeploymentPolicy:
    """What the user said about this start.

    ``allow_state_loss``: names (store, repartition topic, or their topics) whose loss is
    intended. ``upgrade``: carry moved generated names over (``fluvial upgrade``).

    ``Application(topology, config, deployment=DeploymentPolicy(allow_state_loss=
    frozenset({"KSTREAM-AGGREGATE-STATE-STORE-0000000002"})))`` is ``fluvial run
    --allow-state-loss KSTREAM-AGGREGATE-STATE-STORE-0000000002`` in Python.
    """

    allow_state_loss: frozenset[str] = frozenset()
    upgrade: bool = False

    def allows(self, resource: Resource, application_id: str) -> bool:
        """Whether the user named ``resource`` (by its name, or its topic with or without the
        application id) as one whose loss is intended."""
        names = {resource.name, resource.topic, f"{application_id}-{resource.topic}"}
        return bool(names & self.allow_state_loss)


@dataclass(frozen=True)
class Move:
    """An old resource and the new one with the same signature."""

    old: Resource
    new: Resource


@dataclass
class DeploymentPlan:
    """The outcome of comparing a start with the last deployment; see :func:`plan_deployment`."""

    application_id: str
    topology: Topology  # with carried-over topics applied
    resources: list[Resource]
    previous: list[Resource] | None
    carried: list[Move] = field(default_factory=list)  # moved by this start (upgrade)
    lost: list[Resource] = field(default_factory=list)  # left behind, by the user's say-so
    recreated: list[Resource] = field(default_factory=list)  # missing, allowed to start empty
    left_empty: list[Resource] = field(default_factory=list)  # left behind, holding nothing
    present: set[str] = field(default_factory=set)  # topics of ``resources`` that exist now
    previous_present: set[str] = field(default_factory=set)  # ... when ``previous`` was recorded

    @property
    def changed(self) -> bool:
        if self.previous is None:
            return bool(self.resources)
        return _as_record(self.previous) != _as_record(self.resources)

    def summary(self) -> list[str]:
        """Lines for people: what this deployment carries over and what it drops."""
        lines = [
            f"{m.old.describe()} -> {m.new.name} (topic {self.application_id}-{m.old.topic})"
            for m in self.carried
        ]
        lines += [f"dropped, as allowed: {r.describe()}" for r in self.lost]
        lines += [f"recreated empty, as allowed: {r.describe()}" for r in self.recreated]
        return lines


def check_explicit_names(topology: Topology, config: StreamsConfig) -> None:
    """``ensure_explicit_internal_resource_naming``: every store and repartition topic named."""
    if not config.ensure_explicit_internal_resource_naming:
        return
    generated = [r for r in layout_of(topology) if r.generated]
    if not generated:
        return
    listing = "\n".join(f"  - {r.describe()}: name it with {naming_hint(r)}" for r in generated)
    raise TopologyError(
        f"ensure_explicit_internal_resource_naming is on, but {len(generated)} internal "
        f"name(s) of this topology are generated from operator positions, which shift when "
        f"an operator is added or removed before them:\n{listing}"
    )


def plan_deployment(
    topology: Topology,
    config: StreamsConfig,
    policy: DeploymentPolicy | None = None,
    admin: AdminClient | None = None,
) -> DeploymentPlan:
    """Compare ``topology`` with the last deployment; raise :class:`StateLossError` naming what
    it would lose, unless ``policy`` allows it. Nothing is created or written here."""
    policy = policy or DeploymentPolicy()
    check_explicit_names(topology, config)
    app_id = config.application_id
    admin = admin or AdminClient(admin_settings(config))
    probe = _Probe(config, admin)
    try:
        record = _read_record(config, probe)
        previous, present = record if record is not None else (None, set())
        new = layout_of(topology)
        # Names carried over by an earlier upgrade (or simply the same names) keep their topics.
        if previous is not None:
            earlier = {(r.kind, r.name): r for r in previous}
            new = [_on_topic(r, earlier[(r.kind, r.name)].topic)
                   if (r.kind, r.name) in earlier else r for r in new]  # fmt: skip
        old = previous if previous is not None else _found_in_kafka(app_id, probe, new)
        used = {r.topic for r in new}
        behind = [r for r in old if r.topic not in used]
        holding = {r.topic: probe.holds(app_id, r) for r in behind}
        left = [r for r in behind if holding[r.topic]]
        plan = DeploymentPlan(app_id, topology, new, previous, previous_present=present)
        plan.left_empty = [r for r in behind if not holding[r.topic]]
        # Matched among everything left behind: an empty topic is carried over as well, so the
        # names stay those of the older deployment.
        moves, unmatched = _match(behind, new, {r.topic for r in old})
        if policy.upgrade:
            carried = {m.new.name: m for m in moves if not _ambiguous(m, moves)}
            plan.carried = list(carried.values())
            new = [_on_topic(r, carried[r.name].old.topic) if r.name in carried else r
                   for r in new]  # fmt: skip
            left = [r for r in left if all(m.old is not r for m in plan.carried)]
        _warn_unknown_names(policy, old, new, app_id)
        refused = [r for r in left if not policy.allows(r, app_id)]
        plan.lost = [r for r in left if policy.allows(r, app_id)]
        if refused:
            raise StateLossError(_loss_message(app_id, refused, moves, unmatched, probe,
                                               policy.upgrade))  # fmt: skip
        recorded = [r for r in old if r.topic in present] if previous is not None else None
        missing = _missing(topology, config, probe, new, recorded)
        refused_missing = [r for r in missing if not policy.allows(r, app_id)]
        plan.recreated = [r for r in missing if policy.allows(r, app_id)]
        if refused_missing:
            raise StateLossError(_missing_message(app_id, refused_missing, previous is not None))
        plan.resources = new
        plan.present = {r.topic for r in new if probe.exists(f"{app_id}-{r.topic}")}
        plan.topology = _apply(topology, new)
        return plan
    finally:
        probe.close()


def commit_deployment(
    plan: DeploymentPlan, config: StreamsConfig, *, topics_created: bool = True
) -> None:
    """Record ``plan``'s layout as the application's current deployment, when it changed.

    ``topics_created``: the engines record after creating the internal topics; ``fluvial
    upgrade`` records before, and only the topics that exist then can later go missing.
    """
    present = sorted({r.topic for r in plan.resources} if topics_created else plan.present)
    if not plan.changed and set(present) == plan.previous_present:
        return
    topic = deployments_topic(config.application_id)
    create_topics(
        config.bootstrap_servers,
        [
            TopicSpec(
                topic,
                1,
                config.replication_factor,
                {"cleanup.policy": "compact", "min.insync.replicas": "1"},
            )
        ],  # fmt: skip
        admin_config=config.client_config,
    )
    value = json.dumps(
        {
            "version": RECORD_VERSION,
            "written_ms": int(time.time() * 1000),
            "resources": [r.to_json() for r in plan.resources],
            "present": present,
        },
        separators=(",", ":"),
    ).encode()
    producer = Producer(producer_settings(config, None))
    errors: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(str(error))

    producer.produce(topic, key=RECORD_KEY, value=value, on_delivery=delivered)
    left = producer.flush(TIMEOUT_S)
    if left or errors:
        raise ConfigError(
            f"could not record the deployment of {config.application_id!r} in {topic}: "
            f"{errors[0] if errors else 'the broker did not answer in time'}"
        )
    for line in plan.summary():
        log.info("deployment: %s", line)


def recorded_topics(config: StreamsConfig) -> list[str]:
    """The deployment record's topic and every internal topic the last deployment recorded
    (carried-over names included), with the application id: what a reset deletes besides the
    topology's own."""
    admin = AdminClient(admin_settings(config))
    probe = _Probe(config, admin)
    try:
        topic = deployments_topic(config.application_id)
        if not probe.exists(topic):
            return []
        record = _read_record(config, probe)
        recorded = record[0] if record is not None else []
        return [topic] + [f"{config.application_id}-{r.topic}" for r in recorded]
    finally:
        probe.close()


# -- the comparison ---------------------------------------------------------------------------


def _warn_unknown_names(
    policy: DeploymentPolicy, old: list[Resource], new: list[Resource], app_id: str
) -> None:
    """A name given to ``--allow-state-loss`` that names nothing is most likely misspelt; a
    start goes on (the flag may outlive the one start it was meant for), and says so."""
    known = set()
    for r in old + new:
        known |= {r.name, r.topic, f"{app_id}-{r.topic}"}
    for name in sorted(policy.allow_state_loss - known):
        log.warning("--allow-state-loss %s names no store or repartition topic of %s's last "
                    "deployment or of this one; known: %s", name, app_id,
                    ", ".join(sorted(r.name for r in old)) or "none")  # fmt: skip


def _on_topic(resource: Resource, topic: str) -> Resource:
    return Resource(resource.kind, resource.name, topic, resource.signature, resource.detail)


def _match(
    left: list[Resource], new: list[Resource], old_topics: set[str]
) -> tuple[list[Move], list[Resource]]:
    """Each left-behind resource with the new ones of equal signature that took no old topic."""
    fresh = [r for r in new if r.topic not in old_topics]
    moves: list[Move] = []
    unmatched: list[Resource] = []
    for old in left:
        candidates = [r for r in fresh if r.kind == old.kind and r.signature == old.signature
                      and old.signature]  # fmt: skip
        if len(candidates) > 1 and old.operator:
            # Alike by signature: the same generated operator is the better guess, if unique.
            same_op = [r for r in candidates if r.operator == old.operator]
            candidates = same_op or candidates
        if not candidates:
            unmatched.append(old)
        moves.extend(Move(old, c) for c in candidates)
    return moves, unmatched


def _ambiguous(move: Move, moves: list[Move]) -> bool:
    """Whether either side of ``move`` has another candidate: then nothing is guessed."""
    return any(m is not move and (m.old is move.old or m.new is move.new) for m in moves)


def _apply(topology: Topology, resources: list[Resource]) -> Topology:
    changelogs = {
        r.name: r.topic
        for r in resources
        if r.kind == STORE and r.topic != default_topic(STORE, r.name)
    }
    repartitions = {
        r.name: r.topic for r in resources if r.kind == REPARTITION and r.topic != r.name
    }
    if not changelogs and not repartitions and not topology.renamed_topics:
        return topology
    return topology.renamed(changelogs, repartitions)


def _found_in_kafka(app_id: str, probe: _Probe, new: list[Resource]) -> list[Resource]:
    """Without a deployment record: the application's changelog and repartition topics in Kafka.

    A topic whose name another application's id could own (``shop`` and ``shop-eu``) is left
    out: it is not known to be this application's.
    """
    from fluvial.runtime.reset import name_part, other_owner

    found = []
    prefix = f"{app_id}-"
    for topic in probe.topics():
        name = name_part(app_id, topic)
        if name is None or other_owner(app_id, topic) is not None:
            continue
        short = topic[len(prefix) :]
        if short.endswith("-changelog"):
            found.append(Resource(STORE, name, short, "", "found in Kafka"))
        elif short.endswith("-repartition"):
            found.append(Resource(REPARTITION, short, short, "", "found in Kafka"))
    return found


def _missing(
    topology: Topology,
    config: StreamsConfig,
    probe: _Probe,
    new: list[Resource],
    recorded: list[Resource] | None,
) -> list[Resource]:
    """Resources whose topic is gone although the application has committed state for it.

    With a record: the topic was part of the last deployment. Without one: its sub-topology
    has committed offsets (the application ran, and its state was in that topic).
    """
    app_id = config.application_id
    gone = [r for r in new if not probe.exists(f"{app_id}-{r.topic}")]
    if not gone:
        return []
    if recorded is not None:
        topics = {r.topic for r in recorded}
        return [r for r in gone if r.topic in topics]
    # The topics of each sub-topology that has committed offsets: its changelogs and sources.
    committed: set[str] = set()
    for sub in _apply(topology, new).subtopologies(app_id):
        if probe.has_commits(sub.source_topics):
            committed |= set(sub.changelog_topics().values()) | set(sub.source_topics)
    return [r for r in gone if f"{app_id}-{r.topic}" in committed]


# -- messages ---------------------------------------------------------------------------------


def _loss_message(
    app_id: str,
    refused: list[Resource],
    moves: list[Move],
    unmatched: list[Resource],
    probe: _Probe,
    upgrading: bool,
) -> str:
    lines = [
        f"refusing to start {app_id!r}: this version of the topology no longer uses "
        f"{len(refused)} place(s) where the last deployment keeps state, and would start them "
        "empty:"
    ]
    movable = []
    for r in refused:
        held = probe.describe_held(app_id, r)
        candidates = [m.new for m in moves if m.old is r]
        if len(candidates) == 1 and not _ambiguous(next(m for m in moves if m.old is r), moves):
            where = f"now {candidates[0].name} (the same operator, moved)"
            movable.append(r)
        elif candidates:
            names = ", ".join(c.name for c in candidates)
            where = f"alike: {names}; too many to tell which, so none is chosen"
        elif r in unmatched and r.signature:
            where = "no operator of this version matches it"
        else:
            where = "not recognisable (no deployment record; started by an older fluvial)"
        lines.append(f"  - {r.describe()}: {held}; {where}")
    lines.append("Ways on:")
    if movable and not upgrading:
        lines.append(
            "  - carry it over: 'fluvial upgrade APP.py --dry-run' shows the mapping, "
            "'fluvial upgrade APP.py' records it, then run as usual"
        )
    lines.append(
        "  - name the operator so its state stays put: "
        + "; ".join(
            f'{naming_hint(r).split("(")[0]}("{r.name.removesuffix("-repartition")}")'
            for r in refused[:3]
        )  # fmt: skip
        + " keeps the old name (Materialized.as_, Grouped.as_, Named, StreamJoined)"
    )
    allow = " ".join(f"--allow-state-loss {r.name}" for r in refused)
    lines.append(
        f"  - or, if losing it is intended: fluvial run APP.py {allow} (or fluvial reset APP.py "
        "to start the whole application over)"
    )
    lines.append("Nothing was created or changed.")
    return "\n".join(lines)


def _missing_message(app_id: str, missing: list[Resource], recorded: bool) -> str:
    why = "the last deployment used it" if recorded else "the application has committed offsets"
    listing = "\n".join(f"  - {r.describe()}: topic {app_id}-{r.topic}" for r in missing)
    allow = " ".join(f"--allow-state-loss {r.name}" for r in missing)
    return (
        f"refusing to start {app_id!r}: internal topic(s) are missing, but {why}; recreated "
        f"empty, their state would be gone in silence:\n{listing}\n"
        "Restore the topic(s), or start over with 'fluvial reset APP.py', or, if starting them "
        f"empty is intended: fluvial run APP.py {allow}. Nothing was created or changed."
    )


# -- reading Kafka ------------------------------------------------------------------------------


def _as_record(resources: Iterable[Resource]) -> list[dict[str, str]]:
    return sorted((r.to_json() for r in resources), key=lambda d: (d["kind"], d["name"]))


def _read_record(config: StreamsConfig, probe: _Probe) -> tuple[list[Resource], set[str]] | None:
    """The last deployment's layout and the topics that existed when it was recorded."""
    topic = deployments_topic(config.application_id)
    if not probe.exists(topic):
        return None
    last = None
    for _key, value in probe.read_all(topic):
        last = value
    if last is None:
        return None
    try:
        data = json.loads(last)
        resources = [Resource.from_json(r) for r in data["resources"]]
        present = set(data.get("present", [r.topic for r in resources]))
        return resources, present
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"the deployment record in {topic} cannot be read ({error}): was it written by a "
            "newer fluvial? Upgrade fluvial, or delete the topic to start comparing afresh"
        ) from None


def _retrying(action: Callable[[], T], what: str) -> T:
    """``action``, tried again while Kafka answers with a transient error (a coordinator that
    is still loading, or moving), for up to :data:`TIMEOUT_S`."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        try:
            return action()
        except KafkaException as error:
            kafka_error = error.args[0]
            transient = kafka_error.retriable() or kafka_error.code() in TRANSIENT_ERRORS
            if not transient or time.monotonic() > deadline:
                raise ConfigError(f"could not {what}: {kafka_error.str()}") from None
            log.info("%s: %s; retrying", what, kafka_error.str())
            time.sleep(0.5)


class _Probe:
    """What Kafka holds of the application: topics, changelog sizes, unconsumed records."""

    def __init__(self, config: StreamsConfig, admin: AdminClient) -> None:
        self.config = config
        try:
            self._metadata = admin.list_topics(timeout=TIMEOUT_S).topics
        except KafkaException as error:
            raise ConfigError(
                f"cannot list topics on {config.bootstrap_servers}: {error.args[0]}"
            ) from None
        self._consumer: Consumer | None = None
        self._held_counts: dict[str, int] = {}

    @property
    def consumer(self) -> Consumer:
        # The application's group, so committed offsets are its own; it never joins or commits.
        if self._consumer is None:
            settings = consumer_settings(self.config, client_suffix="-deployments")
            self._consumer = Consumer(settings)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()

    def topics(self) -> list[str]:
        return sorted(self._metadata)

    def exists(self, topic: str) -> bool:
        meta = self._metadata.get(topic)
        return meta is not None and meta.error is None and bool(meta.partitions)

    def _partitions(self, topic: str) -> list[TopicPartition]:
        meta = self._metadata.get(topic)
        if meta is None or not meta.partitions:
            return []
        return [TopicPartition(topic, p) for p in sorted(meta.partitions)]

    def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        return _retrying(
            lambda: self.consumer.get_watermark_offsets(tp, timeout=TIMEOUT_S, cached=False),
            f"read the offsets of {tp.topic} [{tp.partition}]",
        )

    def _committed(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return _retrying(lambda: self.consumer.committed(tps, timeout=TIMEOUT_S),
                         f"read the committed offsets of {self.config.application_id}")  # fmt: skip

    def has_commits(self, topics: Iterable[str]) -> bool:
        tps = [tp for t in topics for tp in self._partitions(t)]
        if not tps:
            return False
        return any(tp.offset >= 0 for tp in self._committed(tps))

    def holds(self, app_id: str, resource: Resource) -> bool:
        return bool(self._held(app_id, resource))

    def describe_held(self, app_id: str, resource: Resource) -> str:
        count = self._held(app_id, resource)
        topic = f"{app_id}-{resource.topic}"
        if resource.kind == STORE:
            return f"{count:,} record(s) in its changelog {topic}"
        more = "or more " if count >= SCAN_LIMIT else ""
        return f"{count:,} {more}record(s) not consumed yet in {topic}"

    def _held(self, app_id: str, resource: Resource) -> int:
        """Records the resource's topic holds (read once: the refusal message counts them too)."""
        topic = f"{app_id}-{resource.topic}"
        if topic not in self._held_counts:
            tps = self._partitions(topic)
            if resource.kind == STORE:
                self._held_counts[topic] = sum(
                    max(0, high - low) for low, high in map(self._watermarks, tps)
                )
            else:
                self._held_counts[topic] = sum(map(self._unconsumed, self._committed(tps)))
        return self._held_counts[topic]

    def _unconsumed(self, committed: TopicPartition) -> int:
        """Data records of a repartition partition past what the application committed.

        Progress records are not data, and a record catch-up completeness took out of offset
        order (its writer's ``done`` offset in the commit metadata) was processed already.
        """
        tp = TopicPartition(committed.topic, committed.partition)
        low, high = self._watermarks(tp)
        start = committed.offset if committed.offset >= 0 else low
        if start >= high:
            return 0
        done = CommitMetadata.decode(committed.metadata).writers.get((tp.topic, tp.partition), {})
        count = 0
        for message in self._scan(TopicPartition(tp.topic, tp.partition, start), high):
            headers = dict(message.headers() or [])
            if PROGRESS_HEADER in headers:
                continue
            writer = headers.get(WRITER_HEADER)
            state = done.get(writer.decode()) if writer is not None else None
            if state is not None and message.offset() <= state.done:
                continue
            count += 1
            if count >= SCAN_LIMIT:
                break
        return count

    def read_all(self, topic: str) -> list[tuple[bytes | None, bytes | None]]:
        out = []
        for tp in self._partitions(topic):
            low, high = self._watermarks(tp)
            if high > low:
                start = TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING)
                out += [(m.key(), m.value()) for m in self._scan(start, high)]
        return out

    def _scan(self, start: TopicPartition, high: int) -> Iterator[ConsumedMessage]:
        """Messages from ``start`` to just before ``high``.

        Transaction markers take offsets, so the end is also reached when the consumer's
        position reaches ``high`` with nothing more to read.
        """
        consumer = self.consumer
        consumer.assign([start])
        deadline = time.monotonic() + 4 * TIMEOUT_S
        try:
            while time.monotonic() < deadline:
                batch = consume(consumer, 500, 1.0)
                for message in batch:
                    if message.error() is not None:
                        continue
                    if message.offset() >= high:
                        return
                    yield message
                    if message.offset() >= high - 1:
                        return
                if not batch:
                    [position] = consumer.position([TopicPartition(start.topic, start.partition)])
                    if position.offset >= high:
                        return
            raise ConfigError(
                f"could not read {start.topic} [{start.partition}] to its end within "
                f"{4 * TIMEOUT_S:.0f} s while comparing deployments: is a broker down?"
            )
        finally:
            consumer.unassign()
