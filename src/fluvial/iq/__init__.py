"""Interactive queries: reading a running application's state stores, locally and over HTTP.

- :mod:`fluvial.iq.queries`: point, range and window queries on a task's stores, and the
  isolation levels (``committed``, ``latest``); what ``Application.store`` returns.
- :mod:`fluvial.iq.service`: those queries as JSON, for the tasks of this process.
- :mod:`fluvial.iq.server`: the HTTP endpoint (``--serve``): queries, health and metrics.
- :mod:`fluvial.iq.board`: the shared board on which workers say where each task stands,
  for the reader process.
- :mod:`fluvial.iq.reader`: the reader process that answers committed queries from the
  stores' files beside the local engine's process.
- :mod:`fluvial.iq.spark_routing`: the Spark engine's slot endpoints and the driver's router.
  Only the Spark engine imports it; it imports no pyspark itself.

The package sits below the runtime: the engines, the runner and the worker import it, and it
imports nothing of :mod:`fluvial.runtime` (it reads workers through the
:class:`~fluvial.iq.service.QueriedWorker` protocol, metrics from :mod:`fluvial.metrics`, the
application from :mod:`fluvial.loader`). This ``__init__`` imports nothing, so that reading
queries does not load the HTTP server's libraries.
"""
