"""Nexmark q20 as a fluvial application: ``fluvial run examples/nexmark/q20.py``.

Every example in this folder is the same thin file around its query module
(``fluvial.bench.nexmark.queries``). Settings come from the environment:

- ``NEXMARK_PREFIX``: the input topics' prefix (default ``nexmark``: the topics
  ``fluvial bench nexmark generate`` writes by default);
- ``NEXMARK_OUTPUT``: the output topic (default ``nexmark-q20``);
- ``NEXMARK_APP_ID``: the application id (default ``nexmark-q20``).

``fluvial run`` takes ``--bootstrap-servers``, ``--guarantee`` and ``--commit-interval-ms``.
"""

import os

from fluvial import StreamsBuilder, StreamsConfig
from fluvial.bench.nexmark.model import topics
from fluvial.bench.nexmark.queries import q20 as query

QUERY = "q20"
env = os.environ


def build(builder: StreamsBuilder) -> None:
    output = env.get("NEXMARK_OUTPUT", f"nexmark-{QUERY}")
    query.build(builder, topics(env.get("NEXMARK_PREFIX", "nexmark")), output)


config = StreamsConfig(
    application_id=env.get("NEXMARK_APP_ID", f"nexmark-{QUERY}"),
    processing_guarantee="exactly_once_v2",
)
