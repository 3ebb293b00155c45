"""The hand-written ceiling of Figure 2 (argv[1]: the run's settings as JSON).

No framework: one consumer, one producer and a loop doing exactly the work Figure 2 needs, so
that the report can say how far each system is from what the work itself costs in Python.

- Stage 1 reads the page views, keeps the long ones, and writes them re-keyed by category to a
  repartition topic (the value serialised again, as a framework's serde does).
- Stage 2 reads the repartition topic, counts per (category, 5 s window) in a dict, with a 2 s
  grace against the stream time, and writes each new count to a changelog topic and to the
  output (time-windowed key: the category bytes, then the 8-byte big-endian window start).
- Under exactly_once_v2 every commit interval ends one transaction that holds those records and
  the consumed offsets of both topics (``send_offsets_to_transaction``); under at_least_once
  the producer is flushed and the offsets are committed.

Run by fluvial's interpreter; it imports only the Kafka client, the JSON library and the
standard library.
"""

import json
import signal
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

WINDOW_MS, GRACE_MS = 5_000, 2_000
# Windows older than this behind stream time are never updated again: drop them from the dict.
RETENTION_MS = WINDOW_MS + GRACE_MS
LONG = struct.Struct(">q")


def _json(library: str):  # noqa: ANN202 - (loads, dumps) of the chosen library
    if library == "orjson":
        import orjson

        # orjson writes compact separators already; sorted keys match fluvial's json serde.
        return orjson.loads, lambda obj: orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)

    def dumps(obj: object) -> bytes:
        return json.dumps(obj, separators=(",", ":"), sort_keys=True).encode()

    return json.loads, dumps


def _create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for name, future in admin.create_topics(topics).items():
        try:
            future.result()
        except KafkaException as error:
            if "TOPIC_ALREADY_EXISTS" not in str(error):
                raise RuntimeError(f"creating topic {name!r} failed: {error}") from error


def main() -> None:  # noqa: C901 - one loop, read top to bottom
    s = json.loads(sys.argv[1])
    loads, dumps = _json(s.get("json", "orjson"))
    bootstrap, group, partitions = s["bootstrap"], s["group"], s["partitions"]
    exactly_once, commit_s = s["exactly_once"], s["commit_ms"] / 1000
    source, output = s["input"], s["output"]
    repartition = f"{group}-views-by-category-repartition"
    changelog = f"{group}-counts-changelog"
    _create_topics(
        bootstrap,
        [
            NewTopic(repartition, partitions, 1),
            NewTopic(
                changelog,
                partitions,
                1,
                config={"cleanup.policy": "compact,delete", "retention.ms": str(86_400_000)},
            ),
        ],
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed" if exactly_once else "read_uncommitted",
            "fetch.wait.max.ms": 50,
        }
    )
    producer_config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 100,
        "compression.type": "none",
        "queue.buffering.max.messages": 200_000,
    }
    if exactly_once:
        producer_config["transactional.id"] = f"{group}-ceiling-0"
    producer = Producer(producer_config)
    if exactly_once:
        producer.init_transactions(60)
        producer.begin_transaction()
    consumer.assign(
        [TopicPartition(t, p) for t in (source, repartition) for p in range(partitions)]
    )

    stopping = False

    def stop(_signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    produce = producer.produce
    counts: dict[bytes, int] = {}
    stream_time: dict[int, int] = {}
    next_offsets: dict[tuple[str, int], int] = {}
    dropped = 0
    next_commit = time.monotonic() + commit_s

    def commit() -> None:
        offsets = [TopicPartition(t, p, o) for (t, p), o in next_offsets.items()]
        if exactly_once:
            if offsets:
                producer.send_offsets_to_transaction(
                    offsets, consumer.consumer_group_metadata(), 60
                )
            producer.commit_transaction(60)
            producer.begin_transaction()
        else:
            producer.flush(60)
            if offsets:
                consumer.commit(offsets=offsets, asynchronous=False)
        next_offsets.clear()

    while not stopping:
        batch = consumer.consume(10_000, 0.05)
        for message in batch:
            if message.error():
                raise KafkaException(message.error())
            topic, partition = message.topic(), message.partition()
            timestamp = message.timestamp()[1]
            if topic == source:
                view = loads(message.value())
                if view["period"] >= 30000:
                    while True:
                        try:
                            produce(
                                repartition,
                                dumps(view),
                                view["category"].encode(),
                                timestamp=timestamp,
                            )
                            break
                        except BufferError:
                            producer.poll(0.01)
            else:
                loads(message.value())  # the count ignores it, but a serde reads it
                category = message.key().decode()
                now = stream_time.get(partition, -1)
                if timestamp > now:
                    now = stream_time[partition] = timestamp
                start = timestamp - timestamp % WINDOW_MS
                if start + WINDOW_MS <= now - GRACE_MS:
                    dropped += 1
                else:
                    window_key = category.encode() + LONG.pack(start)
                    count = counts.get(window_key, 0) + 1
                    counts[window_key] = count
                    value = LONG.pack(count)
                    produce(changelog, value, window_key, partition=partition, timestamp=timestamp)
                    produce(output, value, window_key, timestamp=timestamp)
            next_offsets[(topic, partition)] = message.offset() + 1
        producer.poll(0)
        if time.monotonic() >= next_commit:
            commit()
            horizon = min(stream_time.values(), default=0) - RETENTION_MS
            for key in [k for k in counts if LONG.unpack_from(k, len(k) - 8)[0] < horizon]:
                del counts[key]
            next_commit = time.monotonic() + commit_s
    commit()
    consumer.close()
    print(f"ceiling: stopped; {dropped} late records dropped", file=sys.stderr)


if __name__ == "__main__":
    main()
