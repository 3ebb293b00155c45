"""A process that runs stream tasks collects young garbage less often, and never more often than
its own setting asked (``fluvial.processor.task.collect_young_garbage_less_often``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROGRAM = """
import gc, sys
if sys.argv[1] != "default":
    gc.set_threshold(int(sys.argv[1]), 7, 9)
from fluvial import StreamsBuilder, serdes
from fluvial.testing import TopologyTestDriver

builder = StreamsBuilder()
builder.stream("in", key_serde=serdes.string(), value_serde=serdes.string()).to("out")
with TopologyTestDriver(builder.build()) as driver:
    driver.create_input_topic("in", serdes.string(), serdes.string()).pipe_input("k", "v")
    print(gc.get_threshold())
"""


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("default", "(20000, 10, 10)"),  # Python's 700 raised; the older generations' ratios kept
        ("100", "(20000, 7, 9)"),
        ("50000", "(50000, 7, 9)"),  # a higher setting of the process's own stays
        ("0", "(0, 7, 9)"),  # the collector switched off stays off
    ],
)
def test_running_a_task_raises_the_young_threshold_only(before: str, after: str) -> None:
    shown = subprocess.run(
        [sys.executable, "-c", PROGRAM, before], capture_output=True, text=True, timeout=300
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip().splitlines()[-1] == after
