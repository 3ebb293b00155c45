"""A sink writer run as its own process, producing slowly: the zombie of the fencing test.

It runs exactly the code a Spark task runs for one partition of a batch, with rows that take
``delay`` seconds each. After ``PAUSE_AFTER`` rows it waits for a line on stdin before the
rest: its transaction stays open, part-written, until the test lets it go on.

    python -m tests.spark.slow_writer BOOTSTRAP TOPIC SINK_ID BATCH_ID ROWS DELAY_S [PAUSE_AFTER]
"""

from __future__ import annotations

import sys
import time

from fluvial.spark import KafkaSink
from fluvial.spark.sink import _write_partition


def main() -> None:
    bootstrap, topic, sink_id, batch, count, delay = sys.argv[1:7]
    pause_after = int(sys.argv[7]) if len(sys.argv) > 7 else None
    sink = KafkaSink(topic, bootstrap_servers=bootstrap, sink_id=sink_id)
    rows = [f"z{i % 4}-{i}" for i in range(int(count))]

    def slowly():  # noqa: ANN202
        for i, row in enumerate(rows):
            if i == pause_after:
                sys.stdin.readline()
            time.sleep(float(delay))
            yield row.split("-")[0].encode(), row.encode(), topic, None, None, None

    print(list(_write_partition(sink._spec, int(batch), 1, 0, slowly(), len(rows))), flush=True)


if __name__ == "__main__":
    main()
