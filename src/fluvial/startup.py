"""A ``fluvial`` command stopped (SIGTERM) while it starts exits cleanly, with a word.

Python's default for SIGTERM ends the process by the signal, silently, and importing fluvial
takes a while (longer on a loaded machine). So when this process is the ``fluvial`` command
line (the ``fluvial`` script, or ``python -m fluvial.cli``), importing this module, the first
thing ``import fluvial`` does, makes a SIGTERM exit at once with a message and code 143, until
a command installs handlers of its own (``fluvial run`` and ``fluvial sink`` commit and stop).
Nothing has started by then, so nothing is left half done. A program that imports fluvial as
a library keeps its own signal handling.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType


def _exit_before_start(signum: int, _frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    sys.stderr.write(f"fluvial: stopped by {name} while starting; nothing was started\n")
    raise SystemExit(128 + signum)


def is_the_command_line(argv: list[str]) -> bool:
    """Whether ``argv`` (the interpreter's own, ``sys.orig_argv``) runs the ``fluvial`` CLI."""
    if any(a == "-m" and b == "fluvial.cli" for a, b in zip(argv, argv[1:], strict=False)):
        return True
    return len(argv) > 1 and Path(argv[1]).name == "fluvial"


if is_the_command_line(list(getattr(sys, "orig_argv", []))):
    signal.signal(signal.SIGTERM, _exit_before_start)
