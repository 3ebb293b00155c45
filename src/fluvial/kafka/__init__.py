"""fluvial's Kafka layer: the local cluster (and, later, clients and admin helpers)."""

from fluvial.kafka.local import KAFKA_VERSION, LocalKafka, default_data_dir, free_port

__all__ = ["KAFKA_VERSION", "LocalKafka", "default_data_dir", "free_port"]
