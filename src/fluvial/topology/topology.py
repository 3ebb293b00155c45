"""``Topology``: the frozen processor graph, cut into sub-topologies, plus what the runtime needs.

A sub-topology is a connected part of the graph: nodes joined by parent/child edges or by a
shared state store. Repartition topics are the only links between sub-topologies, which is why
each sub-topology can run as independent tasks, one per partition.

The application id is not known when a topology is built; internal topic names are completed by
:meth:`Topology.subtopologies` and friends once the runtime binds one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from fluvial.topology.nodes import (
    ONE_DAY_MS,
    Node,
    ProcessorNode,
    SinkNode,
    SourceNode,
    StoreSpec,
)


@dataclass(frozen=True)
class InternalTopic:
    """A topic the application creates and owns (repartition or changelog)."""

    name: str
    kind: str
    configs: dict[str, str] = field(default_factory=dict)
    num_partitions: int | None = None
    # Topics whose partition count this one follows when ``num_partitions`` is None.
    follows: tuple[str, ...] = ()

    def full_name(self, application_id: str) -> str:
        return f"{application_id}-{self.name}"


@dataclass(frozen=True)
class Subtopology:
    """One independently runnable part of a topology, with topic names bound to an application."""

    id: int
    application_id: str
    node_names: tuple[str, ...]
    nodes: dict[str, Node]
    stores: tuple[StoreSpec, ...]
    source_topics: tuple[str, ...]
    repartition_source_topics: tuple[str, ...]
    sink_topics: tuple[str, ...]
    _internal: frozenset[str]

    def resolve(self, topic: str) -> str:
        """The real topic name: internal topics get the ``<application_id>-`` prefix."""
        return f"{self.application_id}-{topic}" if topic in self._internal else topic

    def source_node_for(self) -> dict[str, SourceNode]:
        """Resolved topic name -> the source node reading it."""
        found: dict[str, SourceNode] = {}
        for name in self.node_names:
            node = self.nodes[name]
            if isinstance(node, SourceNode):
                for topic in node.topics:
                    found[self.resolve(topic)] = node
        return found

    def repartition_topics_written(self) -> frozenset[str]:
        """Resolved names of the repartition topics this sub-topology's sinks write."""
        return frozenset(
            self.resolve(n.topic)
            for n in self.nodes.values()
            if isinstance(n, SinkNode) and n.name in self.node_names and n.topic in self._internal
        )

    def sources_reaching(self, node: str) -> frozenset[str]:
        """Resolved source topics whose records can flow to ``node`` along the graph's edges.

        A shared store is no edge: a stream-table join reads its table through the store, so
        the table's source reaches the table's own nodes, never what the join forwards.
        """
        parents: dict[str, list[str]] = {}
        for name in self.node_names:
            for child in self.nodes[name].children:
                parents.setdefault(child, []).append(name)
        seen, todo = {node}, [node]
        topics: set[str] = set()
        while todo:
            current = self.nodes[todo.pop()]
            if isinstance(current, SourceNode):
                topics.update(self.resolve(t) for t in current.topics)
            for parent in parents.get(current.name, ()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return frozenset(topics)

    def repartition_feeds(self) -> dict[str, frozenset[str]]:
        """Repartition topic written (resolved) -> the source topics whose records can reach a
        sink writing it: the only inputs that bound what this sub-topology can still write
        there (see :mod:`fluvial.processor.completeness`)."""
        feeds: dict[str, frozenset[str]] = {}
        for name in self.node_names:
            node = self.nodes[name]
            if isinstance(node, SinkNode) and node.topic in self._internal:
                topic = self.resolve(node.topic)
                feeds[topic] = feeds.get(topic, frozenset()) | self.sources_reaching(name)
        return feeds

    def changelog_topics(self) -> dict[str, str]:
        """Store name -> changelog topic, for stores with logging on."""
        out = {}
        for store in self.stores:
            topic = store.changelog_topic(self.application_id)
            if topic is not None:
                out[store.name] = topic
        return out


class Topology:
    """A validated processor graph. Build it with :meth:`fluvial.StreamsBuilder.build`."""

    def __init__(
        self,
        nodes: dict[str, Node],
        stores: dict[str, StoreSpec],
        internal_topics: dict[str, InternalTopic],
        copartition_groups: list[set[str]],
        global_nodes: set[str] | None = None,
        global_stores: set[str] | None = None,
        table_sources: set[str] | None = None,
        renamed_topics: dict[str, str] | None = None,
    ) -> None:
        self.nodes = nodes
        self.stores = stores
        self._internal_topics = internal_topics
        self._copartition_sources = copartition_groups
        self.global_nodes = frozenset(global_nodes or ())
        self.global_stores = frozenset(global_stores or ())
        self._table_sources = frozenset(table_sources or ())
        #: Internal topics carried over from an earlier deployment: name in this topology ->
        #: the topic used instead (both without the application id); see :meth:`renamed`.
        self.renamed_topics = dict(renamed_topics or {})
        self._groups = self._make_groups()

    # -- structure --------------------------------------------------------------------------
    def _make_groups(self) -> list[list[str]]:
        """Connected components; numbered from sources sorted by name, as Kafka Streams does.

        Global nodes belong to no sub-topology, and a global store links nothing: every task
        reads it without owning it.
        """
        local = {n: v for n, v in self.nodes.items() if n not in self.global_nodes}
        parent = {name: name for name in local}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def union(a: str, b: str) -> None:
            parent[find(a)] = find(b)

        store_users: dict[str, str] = {}
        for node in local.values():
            for child in node.children:
                union(node.name, child)
            if isinstance(node, ProcessorNode):
                for store in node.stores:
                    if store in self.global_stores:
                        continue
                    if store in store_users:
                        union(node.name, store_users[store])
                    store_users[store] = node.name
        order: list[str] = sorted(n for n, v in local.items() if isinstance(v, SourceNode))
        order += sorted(n for n, v in local.items() if not isinstance(v, SourceNode))
        roots: dict[str, int] = {}
        for name in order:
            roots.setdefault(find(name), len(roots))
        groups: list[list[str]] = [[] for _ in roots]
        for name in local:
            groups[roots[find(name)]].append(name)
        return [self._topological(g) for g in groups]

    def _topological(self, names: list[str]) -> list[str]:
        """Sources first (by name), then breadth-first, so describe() reads top to bottom."""
        members = set(names)
        queue = deque(sorted(n for n in names if isinstance(self.nodes[n], SourceNode)))
        seen: list[str] = []
        indegree = {n: len([p for p in self.nodes[n].parents if p in members]) for n in names}
        while queue:
            name = queue.popleft()
            seen.append(name)
            for child in self.nodes[name].children:
                indegree[child] -= 1
                if indegree[child] == 0:
                    queue.append(child)
        seen += [n for n in names if n not in seen]  # orphans (cannot happen from the DSL)
        return seen

    # -- metadata for the runtime -----------------------------------------------------------
    @property
    def subtopology_count(self) -> int:
        """How many sub-topologies the topology has (each runs as one task per partition)."""
        return len(self._groups)

    def subtopologies(self, application_id: str) -> list[Subtopology]:
        """Every sub-topology with topic names bound to ``application_id``."""
        return [self.subtopology(i, application_id) for i in range(len(self._groups))]

    def subtopology(self, subtopology_id: int, application_id: str) -> Subtopology:
        """One sub-topology with its topic names bound to an application.

        :param subtopology_id: its number, as ``describe()`` shows it (``Sub-topology: 0``).
        :param application_id: the application whose internal topic names it uses.
        :returns: the sub-topology: its nodes, source and sink topics, and stores.
        """
        return self._bind(subtopology_id, self._groups[subtopology_id], application_id)

    def global_subtopology(self, application_id: str) -> Subtopology | None:
        """The GlobalKTable nodes and stores (id -1), or ``None`` without global tables.

        A runtime runs it as one task reading *every* partition of its topics, before the
        stream tasks start, and hands its stores to every stream task (``global_stores``).
        """
        if not self.global_nodes:
            return None
        return self._bind(-1, self._topological(sorted(self.global_nodes)), application_id)

    def global_source_topics(self) -> list[str]:
        """Topics read into GlobalKTables: every partition of them goes to every instance."""
        return sorted(
            t
            for n in self.global_nodes
            if isinstance(self.nodes[n], SourceNode)
            for t in self.nodes[n].topics  # type: ignore[attr-defined]
        )

    def _bind(self, subtopology_id: int, names: list[str], application_id: str) -> Subtopology:
        internal = frozenset(self._internal_topics)
        sources: list[str] = []
        sinks: list[str] = []
        store_names: list[str] = []
        for name in names:
            node = self.nodes[name]
            if isinstance(node, SourceNode):
                sources += node.topics
            elif isinstance(node, SinkNode):
                if node.topic not in sinks:
                    sinks.append(node.topic)
            elif isinstance(node, ProcessorNode):
                store_names += [s for s in node.stores if s not in store_names]
        if subtopology_id >= 0:  # a global store is the global task's, never a stream task's
            store_names = [s for s in store_names if s not in self.global_stores]

        def resolve(topic: str) -> str:
            return f"{application_id}-{topic}" if topic in internal else topic

        return Subtopology(
            id=subtopology_id,
            application_id=application_id,
            node_names=tuple(names),
            nodes=self.nodes,
            stores=tuple(self.stores[s] for s in store_names),
            source_topics=tuple(resolve(t) for t in sources),
            repartition_source_topics=tuple(resolve(t) for t in sources if t in internal),
            sink_topics=tuple(resolve(t) for t in sinks),
            _internal=internal,
        )

    def source_topics(self) -> list[str]:
        """User topics the stream tasks read (internal and global-table topics excluded)."""
        return sorted(
            {
                t
                for n in self.nodes.values()
                if isinstance(n, SourceNode) and n.name not in self.global_nodes
                for t in n.topics
                if t not in self._internal_topics
            }
        )

    def sink_topics(self) -> list[str]:
        """User topics the application writes (internal topics excluded)."""
        return sorted(
            {
                n.topic
                for n in self.nodes.values()
                if isinstance(n, SinkNode) and n.topic not in self._internal_topics
            }
        )

    def internal_topics(
        self, application_id: str, *, additional_retention_ms: int = ONE_DAY_MS
    ) -> list[InternalTopic]:
        """Repartition and changelog topics, with full names and the configs they need.

        ``additional_retention_ms`` is how long window and session changelogs keep records
        past their store's retention.

        ``follows`` lists the user source topics whose (maximum) partition count the topic takes.
        """
        out: list[InternalTopic] = []
        user_sources = self._upstream_user_sources()
        for sub_id, names in enumerate(self._groups):
            for name in names:
                node = self.nodes[name]
                if isinstance(node, SinkNode) and node.topic in self._internal_topics:
                    topic = self._internal_topics[node.topic]
                    if all(t.name != topic.full_name(application_id) for t in out):
                        follows = self._follows(topic, application_id)
                        out.append(
                            InternalTopic(
                                name=topic.full_name(application_id),
                                kind=topic.kind,
                                configs=dict(topic.configs),
                                num_partitions=topic.num_partitions,
                                follows=follows or tuple(user_sources[sub_id]),
                            )
                        )
            sub = self.subtopology(sub_id, application_id)
            for store in sub.stores:
                changelog = store.changelog_topic(application_id)
                if changelog is not None:
                    out.append(
                        InternalTopic(
                            name=changelog,
                            kind="changelog",
                            configs=store.changelog_configs(additional_retention_ms),
                            follows=sub.source_topics,
                        )
                    )
        return out

    def _follows(self, topic: InternalTopic, application_id: str) -> tuple[str, ...]:
        """Topics an internal topic takes its partition count from, when not its writer's inputs.

        Explicit ``follows`` win (foreign-key join topics follow the table they are joined
        with). Otherwise a repartition topic joined with other topics follows the joined topics
        that are not repartition topics, so that the join's inputs come out co-partitioned, as
        Kafka Streams' co-partitioning enforcement does.
        """

        def full(t: str) -> str:
            return f"{application_id}-{t}" if t in self._internal_topics else t

        if topic.follows:
            return tuple(full(t) for t in topic.follows)
        for group in self._copartition_topics():
            if topic.name in group:
                others = sorted(t for t in group if t not in self._internal_topics)
                if others:
                    return tuple(others)
        return ()

    def _copartition_topics(self) -> list[set[str]]:
        groups = []
        for sources in self._copartition_sources:
            topics: set[str] = set()
            for source in sources:
                node = self.nodes[source]
                assert isinstance(node, SourceNode)
                topics |= set(node.topics)
            groups.append(topics)
        return groups

    def _upstream_user_sources(self) -> list[list[str]]:
        """Per sub-topology, the user topics that feed it, directly or via repartition topics."""
        direct: list[set[str]] = []
        reads_internal: list[set[str]] = []
        writes_internal: list[set[str]] = []
        for names in self._groups:
            user: set[str] = set()
            r_int: set[str] = set()
            w_int: set[str] = set()
            for name in names:
                node = self.nodes[name]
                if isinstance(node, SourceNode):
                    for t in node.topics:
                        (r_int if t in self._internal_topics else user).add(t)
                elif isinstance(node, SinkNode) and node.topic in self._internal_topics:
                    w_int.add(node.topic)
            direct.append(user)
            reads_internal.append(r_int)
            writes_internal.append(w_int)
        result = [set(d) for d in direct]
        changed = True
        while changed:  # propagate along repartition links until nothing changes
            changed = False
            for i, reads in enumerate(reads_internal):
                for j, writes in enumerate(writes_internal):
                    if reads & writes and not result[j] <= result[i]:
                        result[i] |= result[j]
                        changed = True
        # A repartition topic written by sub-topology i follows i's own inputs.
        return [sorted(r) for r in result]

    def keyed_source_topics(self) -> set[str]:
        """User topics whose records must sit on their key's partition: those joined with
        another topic, and those read as tables (a key's row lives in one task)."""
        topics: set[str] = set()
        for group in self._copartition_topics():
            if len(group) > 1:
                topics |= group
        for source in self._table_sources:
            node = self.nodes[source]
            if isinstance(node, SourceNode):
                topics |= set(node.topics)
        return {t for t in topics if t not in self._internal_topics}

    def copartition_groups(self, application_id: str) -> list[set[str]]:
        """Sets of topics that must have equal partition counts (join inputs)."""
        return [
            {f"{application_id}-{t}" if t in self._internal_topics else t for t in group}
            for group in self._copartition_topics()
        ]

    # -- internal names carried over between deployments ----------------------------------------
    def internal_topic_names(self) -> list[str]:
        """Internal topics as the nodes name them, without the application id."""
        return sorted(self._internal_topics)

    def repartition_topics(self) -> dict[str, str]:
        """Repartition topic as this topology names it -> the topic its nodes use (the same
        unless renamed), both without the application id."""
        physical_to_name = {v: k for k, v in self.renamed_topics.items()}
        return {
            physical_to_name.get(name, name): name
            for name, topic in self._internal_topics.items()
            if topic.kind == "repartition"
        }

    def internal_names(self) -> dict[str, dict[str, str]]:
        """What :meth:`renamed` was given, as plain data (it travels to Spark executors)."""
        changelogs = {
            name: spec.changelog_name
            for name, spec in self.stores.items()
            if spec.changelog_name is not None
        }
        return {"changelogs": changelogs, "repartitions": dict(self.renamed_topics)}

    def renamed(
        self, changelogs: dict[str, str] | None = None, repartitions: dict[str, str] | None = None
    ) -> Topology:
        """This topology with some internal topics named as an earlier deployment named them.

        ``changelogs``: store -> changelog topic; ``repartitions``: repartition topic -> the
        topic to use; all without the application id. Stores keep their names (processors look
        them up by name); only the topics behind them change.
        """
        import copy
        from dataclasses import replace

        changelogs = dict(changelogs or {})
        wanted = {**self.renamed_topics, **(repartitions or {})}
        # Undo earlier renames first, so renaming composes and a name maps at most once.
        back = {v: k for k, v in self.renamed_topics.items()}
        by_name = {back.get(t, t): topic for t, topic in self._internal_topics.items()}
        mapping = {name: wanted.get(name, name) for name in by_name}
        current = {back.get(t, t): t for t in self._internal_topics}
        rename = {current[name]: mapping[name] for name in by_name}  # node topic -> new

        nodes: dict[str, Node] = {}
        for name, node in self.nodes.items():
            if isinstance(node, SinkNode) and node.topic in rename:
                node = copy.copy(node)
                node.topic = rename[node.topic]
            elif isinstance(node, SourceNode) and any(t in rename for t in node.topics):
                node = copy.copy(node)
                node.topics = [rename.get(t, t) for t in node.topics]
            nodes[name] = node
        internal = {
            rename[t]: replace(
                topic, name=rename[t], follows=tuple(rename.get(f, f) for f in topic.follows)
            )
            for t, topic in self._internal_topics.items()
        }
        stores = {
            name: replace(spec, changelog_name=changelogs.get(name, spec.changelog_name))
            for name, spec in self.stores.items()
        }
        return Topology(
            nodes=nodes,
            stores=stores,
            internal_topics=internal,
            copartition_groups=[set(g) for g in self._copartition_sources],
            global_nodes=set(self.global_nodes),
            global_stores=set(self.global_stores),
            table_sources=set(self._table_sources),
            renamed_topics={k: v for k, v in mapping.items() if k != v},
        )

    def describe(self, application_id: str | None = None):  # noqa: ANN201 - see describe.py
        """A printable :class:`~fluvial.topology.describe.TopologyDescription`.

        Without ``application_id``, internal topics show without their prefix, as in Kafka Streams.
        """
        from fluvial.topology.describe import TopologyDescription

        return TopologyDescription.of(self, application_id)

    def __repr__(self) -> str:
        return f"Topology({len(self._groups)} sub-topologies, {len(self.nodes)} nodes)"
