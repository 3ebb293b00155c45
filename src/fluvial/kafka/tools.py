"""Topic tools for trying fluvial without an admin client of one's own: create, list,
describe, and read (tail) a topic with fluvial's serdes, windowed keys decoded."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource

from fluvial import serdes
from fluvial.errors import ConfigError, FluvialError
from fluvial.kafka.admin import TopicSpec, create_topics
from fluvial.kafka.diagnose import check_client_keys, check_reachable, kafka_logger
from fluvial.records import Windowed

SERDES: dict[str, Callable[[], serdes.Serde[Any]]] = {
    "string": serdes.string,
    "json": serdes.json,
    "long": serdes.long,
    "int": serdes.integer,
    "short": serdes.short,
    "double": serdes.double,
    "float": serdes.float_,
    "uuid": serdes.uuid,
    "bytes": serdes.bytes_,
}


def connect(bootstrap_servers: str, settings: Mapping[str, str]) -> None:
    """Check the settings and that the cluster answers, each failure one clear error."""
    from fluvial.kafka.security import check_connection, is_secured

    check_client_keys(settings, where="the client settings")
    if is_secured(settings):
        check_connection(bootstrap_servers, settings)
    else:
        check_reachable(bootstrap_servers, settings)


def _admin(bootstrap_servers: str, settings: Mapping[str, str]) -> AdminClient:
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers,
        **settings,
        "logger": kafka_logger(),
    }
    return AdminClient(config)


def parse_configs(pairs: list[str]) -> dict[str, str]:
    configs = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--config {pair!r} is not KEY=VALUE, e.g. --config retention.ms=-1")
        configs[name.strip()] = value.strip()
    return configs


def create_topic(
    bootstrap_servers: str,
    settings: Mapping[str, str],
    name: str,
    *,
    partitions: int,
    replication_factor: int = -1,
    configs: Mapping[str, str] | None = None,
) -> None:
    if partitions < 1:
        raise ConfigError(f"--partitions must be at least 1, got {partitions}")
    spec = TopicSpec(name, partitions, replication_factor, dict(configs or {}))
    create_topics(bootstrap_servers, [spec], exist_ok=False, admin_config=dict(settings))


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    replication_factor: int


def list_topics(
    bootstrap_servers: str, settings: Mapping[str, str], *, internal: bool = False
) -> list[TopicInfo]:
    """Topics by name; Kafka's own (``__consumer_offsets``, …) only with ``internal``."""
    metadata = _admin(bootstrap_servers, settings).list_topics(timeout=15)
    infos = []
    for name, topic in metadata.topics.items():
        if name.startswith("__") and not internal:
            continue
        replicas = max((len(p.replicas) for p in topic.partitions.values()), default=0)
        infos.append(TopicInfo(name, len(topic.partitions), replicas))
    return sorted(infos, key=lambda info: info.name)


def describe_topic(
    bootstrap_servers: str, settings: Mapping[str, str], name: str
) -> dict[str, Any]:
    """Partitions (leader, replicas, in-sync replicas, offsets) and the settings that differ
    from the broker's defaults."""
    admin = _admin(bootstrap_servers, settings)
    topic = admin.list_topics(topic=name, timeout=15).topics.get(name)
    if (
        topic is None
        or topic.error is not None
        and topic.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise FluvialError(
            f"topic {name!r} does not exist: fluvial topics list shows those that do"
        )
    if topic.error is not None:
        raise FluvialError(f"cannot describe topic {name!r}: {topic.error.str()}")
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([resource], request_timeout=15)[resource].result()
    configs = {
        key: entry.value
        for key, entry in sorted(entries.items())
        if not entry.is_default and not entry.is_sensitive
    }
    consumer = _reader(bootstrap_servers, settings, "read_uncommitted")
    try:
        partitions = []
        for pid, part in sorted(topic.partitions.items()):
            low, high = consumer.get_watermark_offsets(TopicPartition(name, pid), timeout=15)
            partitions.append(
                {"partition": pid, "leader": part.leader, "replicas": list(part.replicas),
                 "isr": list(part.isrs), "start_offset": low, "end_offset": high}
            )  # fmt: skip
    finally:
        consumer.close()
    return {"topic": name, "partitions": partitions, "configs": configs}


def _reader(bootstrap_servers: str, settings: Mapping[str, str], isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap_servers,
            **settings,
            # Assigned, never subscribed: the group id is never joined nor committed to.
            "group.id": f"fluvial-tail-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "logger": kafka_logger(),
        }
    )


def key_serde(name: str, window_size_ms: int | None, session_windows: bool) -> serdes.Serde[Any]:
    inner = serde_named(name, "--key-serde")
    if window_size_ms is not None and session_windows:
        raise ConfigError("give --window-size-ms (time windows) or --session-windows, not both")
    if window_size_ms is not None:
        if window_size_ms <= 0:
            raise ConfigError(f"--window-size-ms must be positive, got {window_size_ms}")
        return serdes.time_windowed(inner, window_size_ms)
    if session_windows:
        return serdes.session_windowed(inner)
    return inner


def serde_named(name: str, what: str) -> serdes.Serde[Any]:
    if name not in SERDES:
        raise ConfigError(f"{what} {name!r} is unknown: use one of {', '.join(SERDES)}")
    return SERDES[name]()


@dataclass(frozen=True)
class TailedRecord:
    partition: int
    offset: int
    timestamp_ms: int
    key: Any
    value: Any
    headers: list[tuple[str, bytes]]


def tail(
    bootstrap_servers: str,
    settings: Mapping[str, str],
    topic: str,
    *,
    key: serdes.Serde[Any],
    value: serdes.Serde[Any],
    last: int | None = 10,
    follow: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[TailedRecord]:
    """Committed records of ``topic`` (read_committed).

    ``last=N`` gives the last N records of the topic across all its partitions, oldest first
    (see ``_latest``); ``last=None`` reads from the beginning. Without ``follow`` it ends at the
    end the topic had when it started; with it, it waits for more.
    """
    consumer = _reader(bootstrap_servers, settings, "read_committed")
    try:
        metadata = consumer.list_topics(topic=topic, timeout=15).topics.get(topic)
        if metadata is None or metadata.error is not None or not metadata.partitions:
            raise FluvialError(
                f"topic {topic!r} does not exist: fluvial topics list shows those that do, "
                f"fluvial topics create {topic} --partitions N makes it"
            )
        partitions = sorted(metadata.partitions)
        if last is None:
            consumer.assign([TopicPartition(topic, pid, OFFSET_BEGINNING) for pid in partitions])
            backlog = list(_read_to_end(consumer, topic, key, value, len(partitions), should_stop))
        else:
            backlog = _latest(
                [_last_of_partition(consumer, topic, pid, last, key, value, should_stop)
                 for pid in partitions],
                last,
            )  # fmt: skip
            # Follow from each partition's end.
            ends = [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)[1]
                    for p in partitions]  # fmt: skip
            consumer.assign(
                [TopicPartition(topic, p, e) for p, e in zip(partitions, ends, strict=True)]
            )
        yield from backlog
        while follow and not should_stop():
            message = consumer.poll(0.2)
            if message is None or message.error() is not None:
                continue
            yield _decoded(message, key, value)
    finally:
        consumer.close()


def _latest(tails: list[list[TailedRecord]], last: int) -> list[TailedRecord]:
    """The ``last`` latest of the partitions' tails (each in offset order), in time order.

    Later means a later timestamp; between equal timestamps, nearer the end of its partition,
    then a higher partition. Equal timestamps are common (a window's results carry one time,
    a producer stamps a batch alike): the tie rule then takes the partitions' ends in turn
    rather than all of one partition's tail.
    """
    ranked = [
        (record.timestamp_ms, -from_end, record.partition, record)
        for tail in tails
        for from_end, record in enumerate(reversed(tail))
    ]
    ranked.sort(key=lambda entry: entry[:3])
    return [entry[3] for entry in ranked[-last:]] if last else []


def _last_of_partition(
    consumer: Consumer,
    topic: str,
    partition: int,
    last: int,
    key: serdes.Serde[Any],
    value: serdes.Serde[Any],
    should_stop: Callable[[], bool],
) -> list[TailedRecord]:
    """The last ``last`` committed records of one partition. Transaction markers and aborted
    records take offsets too, however many: read further back until enough are found."""
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15)
    back = 2 * max(last, 1)
    while True:
        start = max(low, high - back)
        consumer.assign([TopicPartition(topic, partition, start)])
        found = [r for r in _read_to_end(consumer, topic, key, value, 1, should_stop)
                 if r.offset < high]  # fmt: skip
        if len(found) >= last or start == low or should_stop():
            return found[-last:] if last else []
        back *= 4


def _read_to_end(
    consumer: Consumer,
    topic: str,
    key: serdes.Serde[Any],
    value: serdes.Serde[Any],
    partitions: int,
    should_stop: Callable[[], bool],
) -> Iterator[TailedRecord]:
    """Until every partition reports its end (under read_committed, the last stable offset)."""
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    while len(at_end) < partitions and not should_stop():
        message = consumer.poll(0.2)
        if message is None:
            if time.monotonic() > deadline:
                raise FluvialError(
                    f"reading {topic!r} made no progress for 60 s: is a broker down?"
                )
            continue
        deadline = time.monotonic() + 60
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                at_end.add(int(message.partition() or 0))
                continue
            raise FluvialError(f"cannot read {topic!r}: {error.str()}")
        yield _decoded(message, key, value)


def _decoded(message: Any, key: serdes.Serde[Any], value: serdes.Serde[Any]) -> TailedRecord:
    topic = message.topic()
    return TailedRecord(
        partition=message.partition(),
        offset=message.offset(),
        timestamp_ms=message.timestamp()[1],
        key=_decode(key, topic, message.key()),
        value=_decode(value, topic, message.value()),
        headers=list(message.headers() or []),
    )


def _decode(serde: serdes.Serde[Any], topic: str, data: bytes | None) -> Any:
    try:
        return serde.deserialize(topic, data)
    except Exception:  # noqa: BLE001 - shown undecoded rather than stopping the read
        return Undecodable(data or b"")


@dataclass(frozen=True)
class Undecodable:
    """Bytes the chosen serde could not read; shown as such, never dropped."""

    data: bytes

    def __str__(self) -> str:
        return f"<undecodable {self.data[:40]!r}{'…' if len(self.data) > 40 else ''}>"


def as_json(record: TailedRecord) -> str:
    return json.dumps(
        {
            "partition": record.partition,
            "offset": record.offset,
            "timestamp_ms": record.timestamp_ms,
            **_json_key(record.key),
            "value": _plain(record.value),
            "headers": {k: (v or b"").decode("utf-8", "replace") for k, v in record.headers},
        },
        default=str,
    )


def as_line(record: TailedRecord) -> str:
    when = dt.datetime.fromtimestamp(record.timestamp_ms / 1000, dt.UTC).isoformat(
        timespec="milliseconds"
    )
    key = _text(record.key)
    if isinstance(record.key, Windowed):
        window = record.key.window
        key = f"{_text(record.key.key)}@[{window.start_ms},{window.end_ms})"
    return f"p{record.partition}@{record.offset} {when.replace('+00:00', 'Z')}  {key}  {_text(record.value)}"


def _json_key(key: Any) -> dict[str, Any]:
    if isinstance(key, Windowed):
        return {"key": _plain(key.key), "window_start": key.window.start_ms,
                "window_end": key.window.end_ms}  # fmt: skip
    return {"key": _plain(key)}


def _plain(obj: Any) -> Any:
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, Undecodable):
        return str(obj)
    return obj


def _text(obj: Any) -> str:
    if obj is None:
        return "null"
    if isinstance(obj, str):
        return obj
    return json.dumps(_plain(obj), default=str)
