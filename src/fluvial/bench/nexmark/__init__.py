"""Nexmark, the online-auction streaming benchmark, on fluvial and on Kafka Streams."""
