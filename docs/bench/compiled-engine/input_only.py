"""What run_hotpath does per record before its clock starts: the input, generated and wrapped.

Run under callgrind at two record counts, its difference is the share of a hot-path run
that is not the engine's (see compiled-engine.md)."""

import sys

from fluvial.bench.workloads import generate_input
from fluvial.processor.collector import ConsumedRecord

BASE_MS = 1_700_000_000_000
n = int(sys.argv[1])
inputs = [
    ConsumedRecord(r.key, r.value, r.timestamp_ms, o)
    for o, r in enumerate(generate_input("figure2", n, base_ms=BASE_MS))
]
print(len(inputs))
