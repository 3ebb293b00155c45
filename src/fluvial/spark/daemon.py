"""PySpark's Python worker daemon, with fluvial imported before it forks any worker.

Spark starts one daemon per executor and forks a Python worker from it for each task slot
(``spark.python.daemon.module``). A worker forked from this one starts with fluvial, the
Kafka client and the state stores imported already, so the first lease of a run does not
wait for every worker to import them.
"""

from pyspark.daemon import manager

import fluvial.spark.slots  # noqa: F401 - imported here, before the fork, for every worker

if __name__ == "__main__":
    manager()
