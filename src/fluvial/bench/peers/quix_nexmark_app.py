"""Quix Streams running a Nexmark query (argv[1]: the run's settings as JSON).

Run by the Quix virtual environment's interpreter; it never imports fluvial. The stateless
queries q0–q2 are written here, the same pipelines as fluvial's and Kafka Streams'.
"""

import json
import sys

from quixstreams import Application

COLUMNS = ("auction", "bidder", "price", "dateTime", "extra")


def euros(price: int) -> str:
    thousandths = price * 908
    return f"{thousandths // 1000}.{thousandths % 1000:03d}"


def main() -> None:
    s = json.loads(sys.argv[1])
    app = Application(
        broker_address=s["bootstrap"],
        consumer_group=s["group"],
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once" if s["exactly_once"] else "at-least-once",
        commit_interval=s["commit_ms"] / 1000,
        state_dir=s["state_dir"],
        loglevel="WARNING",
        auto_create_topics=True,
    )
    bids = app.topic(f"{s['prefix']}-bid", key_deserializer="str", value_deserializer="json")
    out = app.topic(s["output"], key_serializer="str", value_serializer="json")
    sdf = app.dataframe(bids)
    query = s["query"]
    if query == "q0":
        sdf = sdf.apply(lambda bid: {c: bid[c] for c in COLUMNS})
    elif query == "q1":
        sdf = sdf.apply(lambda bid: {**{c: bid[c] for c in COLUMNS}, "price": euros(bid["price"])})
    elif query == "q2":
        sdf = sdf.filter(lambda bid: bid["auction"] % 123 == 0)
        sdf = sdf.apply(lambda bid: {"auction": bid["auction"], "price": bid["price"]})
    else:
        raise SystemExit(f"no Quix Streams pipeline for {query}")
    sdf.to_topic(out)
    app.run()


if __name__ == "__main__":
    main()
