"""Kafka's Java partitioner: fluvial places keys where Java's producers and Kafka Streams do."""

from __future__ import annotations

import pytest

from fluvial.partitioner import default_partition, murmur2

# Java's Utils.murmur2 (a signed int) for these keys, as Kafka's own tests state them.
JAVA_MURMUR2 = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize(("key", "java"), JAVA_MURMUR2)
def test_murmur2_is_javas(key: bytes, java: int) -> None:
    assert murmur2(key) == java & 0xFFFFFFFF


@pytest.mark.parametrize(("key", "java"), JAVA_MURMUR2)
def test_default_partition_is_javas_positive_hash_modulo_partitions(key: bytes, java: int) -> None:
    for partitions in (1, 2, 3, 7, 64):
        assert default_partition(key, partitions) == (java & 0x7FFFFFFF) % partitions
