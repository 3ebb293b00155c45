"""Every process fluvial starts goes through here, so that one rule decides its environment.

The rule: a variable that may hold a secret (:func:`~fluvial.redaction.is_secret_variable`:
``FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD``, ``FLUVIAL_KAFKA_ADMIN_PASSWORD``,
``FLUVIAL_SERVE_TOKEN``, ...) is withheld from a child unless the caller names it as one that
child needs. ``java -version``, ``keytool``, the storage-format JVM and the brokers need none
(the brokers' secrets are in their 0600 ``server.properties``); the query reader needs only the
serve token. Spark's JVM (:func:`secrets_withheld`, since PySpark copies this process's own
environment) keeps variables from outside fluvial, which its connectors may need
(``AWS_SECRET_ACCESS_KEY`` for s3a), and gets no ``FLUVIAL_`` secret: executors receive client
settings with each lease.

``tests/security/test_child_environments.py`` checks that no module starts a process any
other way, and scans the environment of every child of ``fluvial run`` and
``fluvial kafka start --secure`` for the secrets.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any

from fluvial.redaction import is_secret_variable


def fluvial_secret(name: str) -> bool:
    """A secret of fluvial's own (``FLUVIAL_...``), which no process but this one needs."""
    return name.startswith("FLUVIAL_") and is_secret_variable(name)


def own_secrets() -> list[str]:
    """The names of fluvial's secrets this process holds: what a child that is fluvial itself
    (``fluvial run`` started by ``fluvial verify`` or the bench) needs to keep."""
    return [name for name in os.environ if fluvial_secret(name)]


def child_environment(
    keep: Collection[str] = (),
    *,
    extra: dict[str, str] | None = None,
    drop: Collection[str] = (),
) -> dict[str, str]:
    """This process's environment without every variable that may hold a secret, except
    those named in ``keep``, and without those in ``drop``; then ``extra`` over it (values
    the caller chose for the child)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in drop and (k in keep or not is_secret_variable(k))
    }
    env.update(extra or {})
    return env


def run(
    cmd: Sequence[str],
    *,
    keep: Collection[str] = (),
    extra_env: dict[str, str] | None = None,
    drop_env: Collection[str] = (),
    **kwargs: Any,
) -> subprocess.CompletedProcess[Any]:
    """:func:`subprocess.run` with the environment rule applied."""
    if "env" in kwargs:
        raise TypeError("pass keep= and extra_env=, not env=: the rule decides the environment")
    env = child_environment(keep, extra=extra_env, drop=drop_env)
    return subprocess.run(cmd, env=env, **kwargs)


def popen(
    cmd: Sequence[str],
    *,
    keep: Collection[str] = (),
    extra_env: dict[str, str] | None = None,
    drop_env: Collection[str] = (),
    **kwargs: Any,
) -> subprocess.Popen[Any]:
    """:class:`subprocess.Popen` with the environment rule applied."""
    if "env" in kwargs:
        raise TypeError("pass keep= and extra_env=, not env=: the rule decides the environment")
    env = child_environment(keep, extra=extra_env, drop=drop_env)
    return subprocess.Popen(cmd, env=env, **kwargs)


@contextlib.contextmanager
def secrets_withheld(withhold: Callable[[str], bool] = fluvial_secret) -> Iterator[None]:
    """The variables ``withhold`` picks out of this process's environment for a while, for
    libraries that start a child with a copy of ``os.environ`` (PySpark's JVM)."""
    held = {name: os.environ.pop(name) for name in list(os.environ) if withhold(name)}
    try:
        yield
    finally:
        for name, value in held.items():
            os.environ.setdefault(name, value)
