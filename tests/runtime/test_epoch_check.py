"""A slot that starts while an earlier driver-epoch check hangs inside the Kafka client does
not wait for it for ever (seen after a leader kill: the restarted slot never ran again)."""

from __future__ import annotations

import threading
import time

from fluvial.runtime import engine
from fluvial.runtime.engine import Application


class _HungCheck:
    """An epoch whose first check blocks, as a transactional call can after a broker kill."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.checks = 0

    def check(self) -> None:
        self.checks += 1
        if self.checks == 1:
            self.release.wait(60)


def test_an_epoch_check_gives_up_waiting_for_a_hung_one(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(engine, "EPOCH_CHECK_WAIT_S", 0.5)
    app = Application.__new__(Application)
    app.epoch = _HungCheck()  # type: ignore[assignment]
    app._epoch_lock = threading.Lock()
    watcher = threading.Thread(target=app._check_epoch, daemon=True)
    watcher.start()
    while app.epoch.checks == 0:  # type: ignore[union-attr]
        time.sleep(0.01)
    started = time.monotonic()
    assert app._check_epoch() is None  # the slot's confirmation goes on unconfirmed
    assert time.monotonic() - started < 5
    app.epoch.release.set()  # type: ignore[union-attr]
    watcher.join(5)
    assert app._check_epoch() is None and app.epoch.checks == 2  # type: ignore[union-attr]
