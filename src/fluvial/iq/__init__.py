"""Interactive queries: reading a running application's state stores, locally and over HTTP.

- :mod:`fluvial.iq.queries`: point, range and window queries on a task's stores, and the
  isolation levels (``committed``, ``latest``); what ``Application.store`` returns.
- :mod:`fluvial.iq.service`: those queries as JSON, for the tasks of this process.
- :mod:`fluvial.iq.server`: the HTTP endpoint (``--serve``): queries, health and metrics.
- :mod:`fluvial.iq.reader`: the reader process that answers committed queries from the
  stores' files beside the local engine's process.
- :mod:`fluvial.iq.spark_routing`: the Spark engine's slot endpoints and the driver's router.
  Only the Spark engine imports it; it imports no pyspark itself.

The package sits between the runtime's worker (whose tasks it reads) and the engines and
runner that start it. This ``__init__`` imports nothing, so that reading queries does not load
the HTTP server's libraries.
"""
