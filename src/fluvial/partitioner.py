"""Kafka's Java partitioner: where a key's records live.

Kafka's Java producers (and fluvial's own, with ``partitioner=murmur2_random``) put a keyed
record on partition ``murmur2(key bytes) % partitions``, with the sign bit cleared. Joins,
tables and interactive queries find a key's records there.
"""

from __future__ import annotations

import functools


def murmur2(data: bytes) -> int:
    """The 32-bit murmur2 hash Kafka's default partitioner uses (seed 0x9747b28c), unsigned."""
    mask = 0xFFFFFFFF
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & mask
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i : i + 4], "little")
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = length % 4
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h


@functools.lru_cache(maxsize=1 << 16)
def default_partition(key_bytes: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (and fluvial's producers) give a key.

    Cached: a query service asks about the same keys again and again, and murmur2 in Python
    costs more than the rest of a point read.
    """
    return (murmur2(key_bytes) & 0x7FFFFFFF) % partitions
