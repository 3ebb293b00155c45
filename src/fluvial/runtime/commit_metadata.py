"""What a task commits with its input offsets, and what a restart derives from it.

Each commit carries, in the offsets' metadata, the task's stream time, its changelogs' end
offsets and what its window and session stores still need of their changelogs
(:class:`CommitMetadata`). When a worker opens the task again, :func:`needed_offsets` and
:func:`changelog_horizons` turn that metadata into what restoration checks and what the next
commits record.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fluvial.config import StreamsConfig
from fluvial.errors import ConfigError
from fluvial.processor.completeness import Positions, WriterState
from fluvial.processor.task import StreamTask
from fluvial.runtime.horizon import ChangelogHorizon, Needed
from fluvial.runtime.progress import repartition_writers
from fluvial.topology.topology import Topology

log = logging.getLogger(__name__)

#: Kafka's default ``offset.metadata.max.bytes``: the longest metadata a commit may carry.
OFFSET_METADATA_MAX_BYTES = 4096


def check_commit_metadata(
    topology: Topology, config: StreamsConfig, partitions: Mapping[str, int] | None = None
) -> None:
    """Refuse, before any topic is created, a sub-topology whose tasks' commits could not carry
    their metadata. The broker would refuse such a commit on every attempt
    (OFFSET_METADATA_TOO_LARGE), so the application would stop at its first commit.

    Without ``partitions`` only the changelog offsets are counted. With every topic's partition
    count, the writer states of merged repartition partitions too (catch-up completeness): one
    per upstream task, so they grow with the upstream partition count.
    """
    subs = topology.subtopologies(config.application_id)
    merged: dict[str, list[str]] = {}
    if partitions is not None and config.catch_up_completeness:
        writers = repartition_writers(subs, partitions)
        merged = {t: ids for t, ids in writers.items() if len(ids) > 1}
    for sub in subs:
        tasks = max((partitions or {}).get(t, 10_000) for t in sub.source_topics)
        last = tasks - 1  # the widest partition number
        changelogs = [(topic, last) for topic in sub.changelog_topics().values()]
        states = {(t, last): merged[t] for t in sub.source_topics if t in merged}
        inputs = len(sub.source_topics) if len(sub.source_topics) > 1 else 0
        written = len(sub.repartition_topics_written() & set(merged))
        size = CommitMetadata.largest(changelogs, states, inputs, written)
        if size <= OFFSET_METADATA_MAX_BYTES:
            continue
        limit = (f"could pass Kafka's offset.metadata.max.bytes "
                 f"({OFFSET_METADATA_MAX_BYTES:,} by default)")  # fmt: skip
        if not states:
            raise ConfigError(
                f"task {sub.id}_* has {len(changelogs)} changelogged stores: its commit metadata "
                f"(changelog offsets, up to {size:,} bytes) {limit}. Split the sub-topology (a "
                "repartition() between groups of stores starts a new one)."
            )
        count = sum(len(ids) for ids in states.values())
        raise ConfigError(
            f"task {sub.id}_* reads {len(states)} repartition topic(s) written by "
            f"{count} upstream tasks in all: its commit metadata (changelog offsets and what it "
            f"took from each writer, up to {size:,} bytes) {limit}. Use fewer input partitions, or "
            "set catch_up_completeness=False (Kafka Streams' stream time across repartition "
            "topics; see 'Catch-up completeness' in docs/semantics.md)."
        )


@dataclass(frozen=True)
class CommitMetadata:
    """What a task commits with its input offsets.

    Its stream time, its changelogs' end offsets, and for window and session changelogs what
    their stores still need (:class:`~fluvial.runtime.horizon.Needed`), which restoration
    checks against the changelog's log start. ``known`` says whether the commit came from a
    version of fluvial that records ``needed`` at all.
    """

    stream_time: int = -1
    changelog_ends: dict[tuple[str, int], int] = field(default_factory=dict)
    needed: dict[tuple[str, int], Needed] = field(default_factory=dict)
    known: bool = False
    # Merged repartition partitions (fluvial.processor.completeness): what the task knew of each
    # writer, and its last record taken, skipped on restart (taken out of offset order).
    writers: dict[tuple[str, int], dict[str, WriterState]] = field(default_factory=dict)
    # Counts the task's commits, across restarts: a partition that a commit left out (nothing
    # read from it since the task started) still carries an older metadata, perhaps with the
    # same stream time, and must not win over the newest.
    sequence: int = 0
    # The newest timestamp processed from each of the task's source topics, in the
    # sub-topology's order, when it has several: a windowed operator that a joined table's
    # input cannot reach resumes from its own inputs' time, not the table's.
    input_times: tuple[int, ...] = ()
    # The progress records (newest input time, read all of its input, where it read to) the
    # task last sent as a writer of each merged repartition topic, in the order of the topics
    # it writes, committed with it: a restart that finds the task where it was sends none
    # again, so an idle application writes nothing new (fluvial.runtime.progress).
    progress: tuple[tuple[int, bool, Positions], ...] | None = None

    PREFIX = "fluvial:"
    #: Compressed form, used once the plain JSON passes :data:`COMPRESS_ABOVE` characters.
    #: Changelog topic names repeat the application id, so a task with many stores compresses
    #: several times over and stays inside the broker's ``offset.metadata.max.bytes``.
    COMPRESSED_PREFIX = "fluvial:z:"
    COMPRESS_ABOVE = 512

    def encode(self) -> str:
        ends = [[t, p, off] for (t, p), off in sorted(self.changelog_ends.items())]
        needed = [
            [t, p, n.needed_from, n.newest_start, n.newest_written]
            for (t, p), n in sorted(self.needed.items())
        ]
        payload: dict[str, object] = {"st": self.stream_time, "cl": ends, "nd": needed}
        if self.sequence:
            payload["sq"] = self.sequence
        if self.input_times:
            payload["it"] = list(self.input_times)
        if self.progress is not None:
            payload["pg"] = [[t, int(c), [list(at) for at in where]]
                             for t, c, where in self.progress]  # fmt: skip
        if self.writers:
            payload["wr"] = [
                [t, p, writer, s.high, int(s.idle), s.done, [list(at) for at in s.positions]]
                for (t, p), states in sorted(self.writers.items())
                for writer, s in sorted(states.items())
            ]
        text = json.dumps(payload, separators=(",", ":"))
        if len(text) <= self.COMPRESS_ABOVE:
            return self.PREFIX + text
        packed = base64.b85encode(zlib.compress(text.encode(), 9)).decode("ascii")
        return self.COMPRESSED_PREFIX + packed

    @classmethod
    def decode(cls, metadata: str | None) -> CommitMetadata:
        if not metadata or not metadata.startswith(cls.PREFIX):
            return cls()
        try:
            if metadata.startswith(cls.COMPRESSED_PREFIX):
                packed = metadata[len(cls.COMPRESSED_PREFIX) :].encode("ascii")
                text = zlib.decompress(base64.b85decode(packed)).decode()
            else:
                text = metadata[len(cls.PREFIX) :]
            data = json.loads(text)
            ends = {(t, int(p)): int(off) for t, p, off in data.get("cl", [])}
            needed = {
                (t, int(p)): Needed(int(nf), int(ns), int(nw))
                for t, p, nf, ns, nw in data.get("nd", [])
            }
            writers: dict[tuple[str, int], dict[str, WriterState]] = {}
            for t, p, writer, high, idle, done, *where in data.get("wr", []):
                # An older fluvial's idle writer, without where it read to, is not taken as
                # idle: it is waited for until it says more (fluvial.processor.completeness).
                positions = _positions(where[0]) if where else ()
                state = WriterState(int(high), bool(idle) and bool(where), int(done), positions)
                writers.setdefault((t, int(p)), {})[str(writer)] = state
            sent = data.get("pg")
            progress = None
            if sent is not None and all(len(state) == 3 for state in sent):
                # (An older fluvial's, without positions, is sent afresh.)
                progress = tuple((int(t), bool(c), _positions(where)) for t, c, where in sent)
            return cls(int(data.get("st", -1)), ends, needed, "nd" in data, writers,
                       int(data.get("sq", 0)), tuple(int(t) for t in data.get("it", ())),
                       progress)  # fmt: skip
        except (ValueError, TypeError, zlib.error):
            return cls()

    @classmethod
    def largest(
        cls,
        changelogs: Iterable[tuple[str, int]],
        writers: Mapping[tuple[str, int], list[str]] | None = None,
        inputs: int = 0,
        progress_topics: int = 0,
    ) -> int:
        """About the longest metadata a task with these changelog partitions, and these writers
        of its merged repartition partitions, can commit: every end and needed offset 19
        digits wide, all different, so they barely compress; each writer's event time within
        11 days of the others' (9 digits differ) and its last offset 10 digits wide."""
        rng = random.Random(0)

        def wide(low: int = 10**18, high: int = 2**63) -> int:
            return rng.randrange(low, high)

        tps = sorted(changelogs)
        now = 1_800_000_000_000

        def where(writer: str) -> Positions:
            # An idle writer's positions: its input topic (the same for every writer of a
            # sub-topology), its partition and a 10-digit offset.
            return (("the-upstream-sub-topology-input-topic", 9999, wide(10**9, 10**10)),)

        states = {
            tp: {w: WriterState(now + wide(0, 10**9), True, wide(10**9, 10**10), where(w))
                 for w in ids}
            for tp, ids in (writers or {}).items()
        }  # fmt: skip
        metadata = cls(wide(), {tp: wide() for tp in tps},
                       {tp: Needed(wide(), -wide(), -wide()) for tp in tps}, True, states,
                       sequence=wide(), input_times=tuple(now + wide(0, 10**9)
                                                          for _ in range(inputs)),
                       progress=tuple((now + wide(0, 10**9), True, where("task"))
                                      for _ in range(progress_topics)))  # fmt: skip
        return len(metadata.encode())

    @classmethod
    def latest(cls, candidates: Iterable[CommitMetadata]) -> CommitMetadata:
        """The newest of a task's partitions' metadata: the highest commit sequence, then the
        highest stream time (commits from before sequences were recorded). Every partition a
        commit includes carries the same metadata; metadata of equal rank are merged."""
        best = cls()
        for candidate in candidates:
            rank = (candidate.sequence, candidate.stream_time)
            if rank > (best.sequence, best.stream_time):
                best = candidate
            elif rank == (best.sequence, best.stream_time):
                best = cls(
                    candidate.stream_time,
                    {**best.changelog_ends, **candidate.changelog_ends},
                    {**best.needed, **candidate.needed},
                    best.known or candidate.known,
                    {**best.writers, **candidate.writers},
                    candidate.sequence,
                    candidate.input_times or best.input_times,
                    candidate.progress if candidate.progress is not None else best.progress,
                )
        return best


def needed_offsets(task: StreamTask, metadata: CommitMetadata) -> dict[tuple[str, int], int]:
    """The lowest offset of each changelog partition that the committed state needs.

    A key-value store needs its whole changelog (compaction keeps the latest record per
    key); a window or session store needs what its last commit recorded.
    """
    specs = {spec.name: spec for spec in task.subtopology.stores}
    needed = {}
    for store_name, tp in task.changelog_partitions().items():
        if not specs[store_name].time_retained:
            needed[tp] = 0
        elif tp in metadata.needed:
            needed[tp] = metadata.needed[tp].needed_from
        elif not metadata.known:
            log.info("%s-%d: the last commit predates needed-offset tracking; its log "
                     "start is not checked until the next commit", *tp)  # fmt: skip
    return needed


def changelog_horizons(
    task: StreamTask, ends: dict[tuple[str, int], int], metadata: CommitMetadata
) -> dict[tuple[str, int], ChangelogHorizon]:
    """What each window or session store of ``task`` still needs of its changelog, followed
    from its restored ``ends`` and its last commit on."""
    horizons = {}
    specs = {spec.name: spec for spec in task.subtopology.stores}
    for store_name, tp in task.changelog_partitions().items():
        spec = specs[store_name]
        if not spec.time_retained:
            continue
        margin = (spec.retention_ms or 0) + (spec.window_size_ms or 0)
        horizon = ChangelogHorizon(margin, ends.get(tp, 0))
        if tp in metadata.needed:
            horizon.resume(metadata.needed[tp])
        horizons[tp] = horizon
    return horizons


def _positions(where: list[list[Any]]) -> Positions:
    """Positions as JSON holds them: [[topic, partition, offset], ...]."""
    return tuple((str(topic), int(partition), int(offset)) for topic, partition, offset in where)
