"""The fluvial side of ``fluvial bench restore``: start the table application on a fresh state
directory, time its restore through the worker metrics, then ask its store for a key.

Run as ``python restore_app.py SETTINGS_JSON`` by :mod:`fluvial.bench.restore`; prints one line
of JSON. The restore starts when a worker has counted the stores it restores
(``stores_to_restore``) and ends when every one of them is restored (``stores_restored``); the
CPU time is this process's, all threads.
"""

import json
import sys
import time

from fluvial import StreamsConfig
from fluvial.bench.restore import STORE, restore_topology
from fluvial.iq.queries import KeyValueView, StoreUnavailableError
from fluvial.metrics import WorkerMetrics
from fluvial.runtime import Application

POLL_S = 0.005
TIMEOUT_S = 1800.0


def restoring(metrics: list[WorkerMetrics]) -> bool:
    return any(m.stores_to_restore for m in metrics)


def restored(metrics: list[WorkerMetrics]) -> bool:
    return restoring(metrics) and all(m.stores_restored >= m.stores_to_restore for m in metrics)


def main(settings: dict) -> dict:
    config = StreamsConfig(
        application_id=settings["application_id"],
        bootstrap_servers=settings["bootstrap"],
        processing_guarantee=settings["guarantee"],
        state_dir=settings["state_dir"],
    )
    app = Application(restore_topology(settings["input"]), config, workers=1)
    out: dict = {"started_at": time.time()}
    deadline = time.monotonic() + TIMEOUT_S
    app.start()
    try:
        while not restoring(app.metrics()):
            app.raise_if_failed()
            if time.monotonic() > deadline:
                raise TimeoutError("the application did not begin to restore")
            time.sleep(POLL_S)
        out["restore_started_at"], cpu_started = time.time(), time.process_time()
        while not restored(app.metrics()):
            app.raise_if_failed()
            if time.monotonic() > deadline:
                raise TimeoutError("the restore did not end")
            time.sleep(POLL_S)
        out["restore_ended_at"] = time.time()
        out["restore_cpu_s"] = time.process_time() - cpu_started
        out["to_restore"] = sum(m.restore_total for m in app.metrics())
        out["restored"] = sum(m.restored for m in app.metrics())
        # Once running, the restored store answers: one key, then every entry counted.
        while True:
            app.raise_if_failed()
            try:
                store = app.store(STORE)
                assert isinstance(store, KeyValueView)  # a table's store
                out["value"] = store.get(settings["key"])
                out["entries"] = len(store.all())
                break
            except StoreUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        app.close()
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))), flush=True)
