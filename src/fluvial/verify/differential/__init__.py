"""Differential verification: generated (topology, input) cases run on fluvial and on Kafka
Streams, outputs and stores compared record by record."""
