"""The HTTP endpoint of a running application: interactive queries, health and Prometheus metrics.

Starlette routes served by uvicorn in a background thread: of the application's process, or
of its reader process (:mod:`fluvial.iq.reader`), which serves the same app.
Routes (every answer is JSON, errors included, except ``/metrics``):

- ``GET /health``: whether the application runs, and how many of its tasks serve queries;
- ``GET /stores``: every store with its type, serdes and partition count;
- ``GET /stores/{store}/keys/{key}``: a point query. Key-value stores answer the value;
  window stores the key's windows (``?time=START`` for one window, ``?from=&to=`` for a range
  of window starts, all live windows otherwise); session stores the key's sessions;
- ``GET /stores/{store}/range?from=&to=`` and ``/stores/{store}/all``: key-value ranges;
- ``GET /stores/{store}/windows?from=&to=``: every key's windows starting in the range;
- ``GET /stores/{store}/count``: the approximate number of entries;
- ``GET /metrics``: Prometheus text, rendered by ``prometheus_client``.

Every query takes ``isolation=committed|latest`` and ``allow_stale=true`` (answer from a
standby replica, with how far behind it is, when the active task is not serving). A refused
query gets a 4xx with a message; a key whose task is restoring or moving gets a 503 with
``Retry-After``. With a bearer token set, every route but ``/health`` requires it.
"""

from __future__ import annotations

import hmac
import inspect
import ipaddress
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import parse_qsl

import uvicorn
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from fluvial.errors import StreamsError
from fluvial.iq.queries import QueryError, StoreUnavailableError

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
TOKEN_ENV = "FLUVIAL_SERVE_TOKEN"
PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: What a query asks for: ``key`` (point or per-key windows/sessions), ``range``, ``all``,
#: ``windows`` (every key's windows in a time range) and ``count``.
OPS = ("key", "range", "all", "windows", "count")
#: The point-query route's path, as the router matches ``/stores/{store}/keys/{key:path}``.
_KEY_PATH = re.compile(r"/stores/([^/]+)/keys/(.*)")


class QueryService(Protocol):
    """What the HTTP layer serves: the local engine's stores, or the Spark driver's router."""

    def stores(self) -> list[dict[str, Any]]: ...

    def health(self) -> tuple[bool, dict[str, Any]]: ...

    def execute(self, store: str, op: str, key: str | None, params: dict[str, str]) -> Any:
        """The answer as a JSON-ready dict (or an awaitable of one)."""
        ...


class QueryMetrics:
    """Queries served, refused and routed, and their latency, in a registry of their own."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.served = Counter(
            "fluvial_queries_served", "Interactive queries answered", ["store", "op"],
            registry=registry,
        )  # fmt: skip
        self.refused = Counter(
            "fluvial_queries_refused",
            "Interactive queries refused (reason: bad_request, unknown_store, unavailable, "
            "unauthorized, failed)",
            ["reason"],
            registry=registry,
        )
        self.routed = Counter(
            "fluvial_queries_routed",
            "Interactive queries forwarded to the slot that owns the key",
            ["slot"],
            registry=registry,
        )
        self.stale = Counter(
            "fluvial_queries_stale",
            "Interactive queries answered from a standby replica (allow_stale=true)",
            ["store"],
            registry=registry,
        )
        self.latency = Histogram(
            "fluvial_query_latency_seconds",
            "Time to answer an interactive query",
            ["op"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0),
            registry=registry,
        )


def make_app(
    service: QueryService | None,
    *,
    token: str | None = None,
    collectors: Iterable[Collector] = (),
    queries_enabled: bool = True,
    internal: dict[str, Callable[[], Any]] | None = None,
) -> tuple[ASGIApp, QueryMetrics]:
    """The Starlette application; ``service`` None serves ``/metrics`` and ``/health`` only.

    ``internal`` adds JSON routes (path to a function giving the body) behind the same token:
    the application process answers its reader process there.
    """
    registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)
    metrics = QueryMetrics(registry)
    expected = f"Bearer {token}".encode() if token else None

    def authorized_by(given: bytes) -> bool:
        return expected is None or hmac.compare_digest(given, expected)

    def authorized(request: Request) -> bool:
        return authorized_by(request.headers.get("authorization", "").encode("latin-1"))

    def refuse(status: int, message: str, reason: str, **headers: str) -> JSONResponse:
        metrics.refused.labels(reason).inc()
        return JSONResponse({"error": message}, status_code=status, headers=headers or None)

    def unauthorized() -> JSONResponse:
        return refuse(401, "a bearer token is required: send 'Authorization: Bearer <token>'",
                      "unauthorized", **{"WWW-Authenticate": "Bearer"})  # fmt: skip

    async def health(request: Request) -> JSONResponse:
        if service is None:
            return JSONResponse({"status": "running"})
        ok, body = service.health()
        return JSONResponse(body, status_code=200 if ok else 503)

    async def prometheus(request: Request) -> Response:
        if not authorized(request):
            return unauthorized()
        # In a thread: a collector may ask another process (the reader asks the application),
        # and the event loop must go on answering queries meanwhile.
        text = await run_in_threadpool(generate_latest, registry)
        return Response(text, media_type=PROMETHEUS_CONTENT_TYPE)

    async def stores(request: Request) -> JSONResponse:
        if not authorized(request):
            return unauthorized()
        assert service is not None
        try:
            return JSONResponse({"stores": service.stores()})
        except StoreUnavailableError as error:
            return refuse(
                503, str(error), "unavailable", **{"Retry-After": str(error.retry_after_s)}
            )

    async def answer(
        op: str, store: str, key: str | None, params: dict[str, str], authorization: bytes
    ) -> JSONResponse:
        if not authorized_by(authorization):
            return unauthorized()
        assert service is not None
        started = time.perf_counter()
        try:
            body = service.execute(store, op, key, params)
            if inspect.isawaitable(body):  # the Spark driver's router forwards queries
                body = await body
        except StoreUnavailableError as error:
            return refuse(503, str(error), "unavailable",
                          **{"Retry-After": str(error.retry_after_s)})  # fmt: skip
        except QueryError as error:
            reason = "unknown_store" if error.status == 404 else "bad_request"
            return refuse(error.status, str(error), reason)
        except StreamsError as error:
            log.warning("query on store %r failed: %s", store, error)
            return refuse(500, f"the query failed: {error}", "failed")
        metrics.latency.labels(op).observe(time.perf_counter() - started)
        metrics.served.labels(store, op).inc()
        if body.get("stale"):
            metrics.stale.labels(store).inc()
        return JSONResponse(body)

    def query(op: str) -> Callable[[Request], Any]:
        async def handle(request: Request) -> JSONResponse:
            return await answer(
                op, request.path_params["store"], request.path_params.get("key"),
                dict(request.query_params),
                request.headers.get("authorization", "").encode("latin-1"),
            )  # fmt: skip

        return handle

    def internal_route(produce: Callable[[], Any]) -> Callable[[Request], Any]:
        async def handle(request: Request) -> JSONResponse:
            if not authorized(request):
                return unauthorized()
            return JSONResponse(produce())

        return handle

    routes = [
        Route("/health", health),
        Route("/metrics", prometheus),
    ]
    routes += [Route(path, internal_route(produce)) for path, produce in (internal or {}).items()]
    if service is not None and queries_enabled:
        routes += [
            Route("/stores", stores),
            Route("/stores/{store}/keys/{key:path}", query("key")),
            Route("/stores/{store}/range", query("range")),
            Route("/stores/{store}/all", query("all")),
            Route("/stores/{store}/windows", query("windows")),
            Route("/stores/{store}/count", query("count")),
        ]
    routed = Starlette(routes=routes)
    if service is None or not queries_enabled:
        return routed, metrics

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        # Point queries, the bulk of the load, skip the router and its middleware: each costs
        # a third less CPU. They are answered by the same code as the route above.
        if scope["type"] == "http" and scope["method"] == "GET":
            match = _KEY_PATH.fullmatch(scope["path"])
            if match is not None:
                query_string = scope["query_string"].decode("latin-1")
                params = dict(parse_qsl(query_string, keep_blank_values=True))
                authorization = next(
                    (value for name, value in scope["headers"] if name == b"authorization"), b""
                )  # fmt: skip
                response = await answer("key", match[1], match[2], params, authorization)
                await response(scope, receive, send)
                return
        await routed(scope, receive, send)

    return app, metrics


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT``; the host defaults to 127.0.0.1."""
    host, _, port_text = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    try:
        port = int(port_text)
    except ValueError:
        raise StreamsError(
            f"--serve {text!r} is not HOST:PORT: give e.g. 127.0.0.1:8080 or :8080"
        ) from None
    if not 0 <= port <= 65535:
        raise StreamsError(f"--serve {text!r}: port {port} is out of range (0-65535)")
    return host, port


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class HttpServer:
    """Serves a Starlette app with uvicorn in a daemon thread until :meth:`stop`."""

    def __init__(
        self,
        app: ASGIApp,
        host: str,
        port: int,
        *,
        name: str = "fluvial-http",
        sock: socket.socket | None = None,
    ) -> None:
        """``sock``: serve on this listening socket (bound elsewhere) instead of binding."""
        self.host = host
        self._config = uvicorn.Config(
            app, host=host, port=port, log_level="warning", access_log=False,
            lifespan="off", timeout_keep_alive=30, proxy_headers=False,
        )  # fmt: skip
        self._server = uvicorn.Server(self._config)
        sockets = [sock] if sock is not None else None
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": sockets}, name=name, daemon=True
        )

    def start(self, timeout_s: float = 30.0) -> None:
        """Start serving; raise if the address cannot be bound."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise StreamsError(
                    f"cannot serve HTTP on {self.host}:{self._config.port}: the address is in "
                    "use or not available here; choose another with --serve HOST:PORT"
                )
            time.sleep(0.01)

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        for server in self._server.servers:
            for sock in server.sockets:
                return int(sock.getsockname()[1])
        return int(self._config.port)

    def stop(self, timeout_s: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout_s)


def listen(address: str, *, token: str | None) -> socket.socket:
    """A listening TCP socket on ``address`` (validated), to hand to the process serving it."""
    host, port = parse_address(address)
    warn_if_open(host, token)
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as error:
        raise StreamsError(
            f"cannot serve HTTP on {host}:{port}: {error.strerror or error}; choose another "
            "address with --serve HOST:PORT"
        ) from None
    return sock


def warn_if_open(host: str, token: str | None) -> None:
    if not _is_loopback(host) and not token:
        log.warning(
            "serving state on %s without a bearer token: anyone who can reach it can read "
            "the application's stores; set %s to require one", host, TOKEN_ENV,
        )  # fmt: skip


def serve(
    service: QueryService | None,
    address: str,
    *,
    token: str | None = None,
    collectors: Iterable[Collector] = (),
) -> tuple[HttpServer, QueryMetrics]:
    """Validate ``address``, then serve ``service`` there; return the running server."""
    host, port = parse_address(address)
    warn_if_open(host, token)
    app, metrics = make_app(service, token=token, collectors=collectors)
    server = HttpServer(app, host, port)
    server.start()
    return server, metrics
