"""Kafka's Java partitioner: where a key's records live.

Kafka's Java producers (and fluvial's own, with ``partitioner=murmur2_random``) put a keyed
record on partition ``murmur2(key bytes) % partitions``, with the sign bit cleared. Joins,
tables and interactive queries find a key's records there.
"""

from __future__ import annotations

from murmurhash2 import murmurhash2 as _murmurhash2

#: The seed of Kafka's murmur2 partitioner.
_SEED = 0x9747B28C


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash Kafka's default partitioner uses (seed 0x9747b28c), unsigned."""
    return _murmurhash2(data, _SEED)


def default_partition(key_bytes: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and fluvial's producers) give a key."""
    return (murmur2(key_bytes) & 0x7FFFFFFF) % partitions
