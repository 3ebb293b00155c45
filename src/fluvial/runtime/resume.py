"""Where a worker's tasks resume: their committed offsets, and their stores restored to match.

On start a worker reads its partitions' committed offsets with the metadata committed beside
them (:func:`read_committed`), restores each task's stores to the state those offsets belong
with (:func:`restore_to_commit`), and tells its standby tasks what of their changelogs the
committed state still needs (:func:`standby_needed`).
"""

from __future__ import annotations

from functools import partial

from confluent_kafka import Consumer, TopicPartition

from fluvial.config import StreamsConfig
from fluvial.errors import StreamsError
from fluvial.processor.task import StreamTask
from fluvial.runtime.client_calls import ClientCalls
from fluvial.runtime.commit_metadata import CommitMetadata, changelog_horizons, needed_offsets
from fluvial.runtime.horizon import ChangelogHorizon
from fluvial.runtime.progress import RepartitionProgress
from fluvial.runtime.restore import Restorer
from fluvial.runtime.standby import StandbyTasks
from fluvial.runtime.state import TaskState
from fluvial.topology.topology import Topology

# Reading committed offsets is retried (5 attempts): a group the principal may not describe
# makes the call wait for its coordinator until it times out, and the retry asks why.
READ_OFFSETS_TIMEOUT_S = 15.0

Committed = dict[tuple[str, int], tuple[int, CommitMetadata]]
"""(topic, partition) -> (committed offset, what was committed with it)."""


def read_committed(
    consumer: Consumer, calls: ClientCalls, partitions: list[tuple[str, int]]
) -> Committed:
    """The committed offset of each of ``partitions`` that has one, with its metadata."""
    tps = [TopicPartition(t, p) for t, p in partitions]
    result: Committed = {}
    if not tps:
        return result  # a worker with only standby tasks
    for tp in calls.call(lambda: consumer.committed(tps, timeout=READ_OFFSETS_TIMEOUT_S),
                         "read offsets"):  # fmt: skip
        if tp.error is not None:
            raise StreamsError(f"cannot read committed offsets of {tp.topic}: {tp.error}")
        if tp.offset >= 0:
            result[(tp.topic, tp.partition)] = (tp.offset, CommitMetadata.decode(tp.metadata))
    return result


def restore_to_commit(
    task: StreamTask,
    state: TaskState,
    committed: Committed,
    restorer: Restorer,
    progress: RepartitionProgress | None,
    *,
    exactly_once: bool,
) -> tuple[CommitMetadata, dict[tuple[str, int], ChangelogHorizon]]:
    """Bring ``task``'s opened stores and stream time to where its last commit left them.

    Returns what that commit carried and what the task's window and session stores still need
    of their changelogs (:func:`~fluvial.runtime.commit_metadata.changelog_horizons`).
    """
    tps = [(t, task.task_id.partition) for t in task.subtopology.source_topics]
    metadata = CommitMetadata.latest(committed[tp][1] for tp in tps if tp in committed)
    if progress is not None:
        progress.merge_inputs(task, metadata.writers)
    # Restore up to the changelog offsets committed with the input offsets: under
    # at-least-once the changelog may run further, with writes of records that
    # will be processed again.
    # Under exactly-once the read_committed changelog is exactly the committed
    # state, so it is restored to its end.
    limits = {} if exactly_once else dict(metadata.changelog_ends)
    if not exactly_once and not any(tp in committed for tp in tps):
        # Nothing committed yet: every input record will be processed again, so
        # no changelog record belongs to the committed state.
        limits = {tp: 0 for tp in task.changelog_partitions().values()}
    has_commit = any(tp in committed for tp in tps)
    needed = needed_offsets(task, metadata) if has_commit else {}
    ends = restorer.restore(task, state, limits, needed)
    horizons = changelog_horizons(task, ends, metadata)
    stream_time = metadata.stream_time
    if stream_time >= 0:
        # Operators that emit on window close must know what was final already.
        task.resume_stream_time(stream_time, metadata.input_times)
    return metadata, horizons


def standby_needed(
    consumer: Consumer,
    calls: ClientCalls,
    topology: Topology,
    config: StreamsConfig,
    standbys: StandbyTasks,
) -> dict[tuple[str, int], int]:
    """What the active tasks' committed state needs of the standby tasks' changelogs."""
    subs = {s.id: s for s in topology.subtopologies(config.application_id)}
    needed: dict[tuple[str, int], int] = {}
    for task_id, task in standbys.tasks.items():
        tps = [
            TopicPartition(t, task_id.partition) for t in subs[task_id.subtopology].source_topics
        ]
        found = calls.call(
            partial(consumer.committed, tps, timeout=READ_OFFSETS_TIMEOUT_S), "read offsets"
        )
        committed = [CommitMetadata.decode(tp.metadata) for tp in found if tp.offset >= 0]
        if committed:
            needed.update(needed_offsets(task, CommitMetadata.latest(committed)))
    return needed
