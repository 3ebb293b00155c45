"""The machine and versions a benchmark ran on: every report and figure states them."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from typing import Any

from fluvial import children


def machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "memory_gib": round(memory_gib, 1),
        "os": f"{platform.system()} {platform.release()}",
    }


def versions() -> dict[str, str]:
    import confluent_kafka

    import fluvial
    from fluvial.kafka.local import KAFKA_VERSION

    java = ""
    try:
        out = children.run(["java", "-version"], capture_output=True, text=True).stderr
        java = out.splitlines()[0] if out else ""
    except OSError:
        pass
    found = {
        "fluvial": fluvial.__version__,
        "python": platform.python_version(),
        "kafka": KAFKA_VERSION,
        "confluent-kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
        "java": java,
    }
    try:
        import pyspark

        found["pyspark"] = pyspark.__version__
    except ImportError:
        pass
    return found


def describe() -> dict[str, Any]:
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "versions": versions(),
    }


def one_line(env: dict[str, Any]) -> str:
    """A caption line for a figure: machine, versions, date."""
    m, v = env["machine"], env["versions"]
    return (
        f"{m['cores']} cores ({m['cpu']}), {m['memory_gib']} GiB; fluvial {v['fluvial']}, "
        f"Python {v['python']}, Kafka {v['kafka']}, librdkafka {v['librdkafka']}; {env['date']}"
    )
