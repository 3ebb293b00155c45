"""Stopping ``fluvial run`` on a signal, within a bounded time whatever Kafka does.

The first SIGTERM or SIGINT asks the application to commit and stop. That commit needs Kafka:
with the brokers unreachable it could block for minutes. So the first signal also starts a
deadline; past it the process exits without a final commit. Nothing committed is lost: the
next start resumes from the last commit (an open transaction is aborted, or fenced by the next
holder of its transactional id), exactly as after a crash. A second Ctrl-C exits at once.

Signal handlers run only in the main thread, between Python bytecodes; a main thread blocked
inside a Kafka client call would not see the signal until the call returns. So blocking work
runs in a helper thread (:func:`run_in_thread`) and the main thread only ever waits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from rich.console import Console

T = TypeVar("T")

DEFAULT_STOP_TIMEOUT_S = 15.0
EXIT_FORCED = 143  # 128 + SIGTERM, as a process killed by it would report
EXIT_INTERRUPTED = 130  # 128 + SIGINT


class SignalStop:
    """Installs SIGTERM/SIGINT handlers that stop an application within ``timeout_s``."""

    def __init__(
        self,
        request_stop: Callable[[], None],
        *,
        timeout_s: float = DEFAULT_STOP_TIMEOUT_S,
        console: Console | None = None,
        before_exit: Callable[[], None] | None = None,
    ) -> None:
        self.request_stop = request_stop
        self.timeout_s = timeout_s
        self.console = console or Console(stderr=True)
        self.before_exit = before_exit
        self.signals = 0
        self.requested = threading.Event()
        self.finished = threading.Event()

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def done(self) -> None:
        """The application stopped by itself: the deadline no longer applies."""
        self.finished.set()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals > 1 and signum == signal.SIGINT:
            # The user insists: stop now, uncommitted work is redone at the next start.
            self._exit(EXIT_INTERRUPTED)
        if self.requested.is_set():
            return
        self.requested.set()
        self.request_stop()
        threading.Thread(target=self._deadline, name="fluvial-stop-deadline", daemon=True).start()

    def _deadline(self) -> None:
        if self.finished.wait(self.timeout_s):
            return
        self.console.print(
            f"fluvial: did not stop within {self.timeout_s:g} s (is Kafka unreachable?); "
            "exiting without a final commit. The next start resumes from the last commit.",
            highlight=False,
            soft_wrap=True,
        )
        self._exit(EXIT_FORCED)

    def _exit(self, code: int) -> None:
        if self.before_exit is not None:
            # Exiting regardless: a failed cancel must not keep the process here.
            with contextlib.suppress(Exception):
                self.before_exit()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_in_thread(action: Callable[[], T], *, poll_s: float = 0.2) -> T:
    """Run ``action`` in a helper thread while the main thread waits, ready for signals."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def target() -> None:
        try:
            outcome.append(action())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name="fluvial-start", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(poll_s)
        time.sleep(0)  # a point where pending signal handlers run
    if failure:
        raise failure[0]
    return outcome[0]
