"""A sink writer run as its own process, producing slowly: the zombie of the fencing test.

It runs exactly the code a Spark task runs for one partition of a batch, with rows that take
``delay`` seconds each, so its transaction stays open long enough to be stopped mid-way.

    python -m tests.spark.slow_writer BOOTSTRAP TOPIC SINK_ID BATCH_ID ROWS DELAY_S
"""

from __future__ import annotations

import sys
import time

from fluvial.spark import KafkaSink
from fluvial.spark.sink import _write_partition


def main() -> None:
    bootstrap, topic, sink_id, batch, count, delay = sys.argv[1:7]
    sink = KafkaSink(topic, bootstrap_servers=bootstrap, sink_id=sink_id)
    rows = [f"z{i % 4}-{i}" for i in range(int(count))]

    def slowly():  # noqa: ANN202
        for row in rows:
            time.sleep(float(delay))
            yield row.split("-")[0].encode(), row.encode(), topic, None, None, None

    print(list(_write_partition(sink._spec, int(batch), 1, 0, slowly(), len(rows))), flush=True)


if __name__ == "__main__":
    main()
