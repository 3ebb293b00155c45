#!/bin/bash
cd /work/main
B="uv run --group bench fluvial bench"
D=docs/bench
$B figure2 --records 100000 --engine both --peers all --json $D/figure2-peers.json
$B passthrough --records 100000 --peers quix,faust,spark-ss --json $D/passthrough-peers.json
$B matrix --records 50000 --commit-intervals 100,1000 --json $D/matrix-local.json
$B matrix --workloads figure2,passthrough --commit-intervals 1000 --engine both --records 100000 --json $D/engines-1s.json
$B passthrough --rate 1000 --seconds 20 --guarantee exactly_once_v2 --commit-interval-ms 100 --json $D/latency-passthrough-eos.json
$B passthrough --rate 1000 --seconds 20 --guarantee at_least_once --commit-interval-ms 100 --json $D/latency-passthrough-alos.json
$B figure2 --rate 1000 --seconds 20 --guarantee exactly_once_v2 --commit-interval-ms 100 --peers kafka-streams --json $D/latency-figure2-eos.json
$B passthrough --records 100000 --partitions 2 --commit-interval-ms 1000 --peers spark-ss,spark-ss-eos --json $D/spark-sink-passthrough.json
$B postgres-sink --records 100000 --json $D/postgres-sink.json
echo ALL DONE
