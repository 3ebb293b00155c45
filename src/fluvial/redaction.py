"""Which settings and environment variables may hold a secret, and what of them may be shown.

One rule serves client settings (:mod:`fluvial.kafka.security`), the environment of every
child process (:mod:`fluvial.children`) and log lines. It sits below both, so that neither
imports the other for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# "dsn": a database connection string may carry a password.
_SECRET_MARKERS = ("password", "secret", "key", "token", "credentials", "jaas", "pem", "dsn")


def is_secret_setting(name: str) -> bool:
    """Whether a setting (``sasl.password``) may hold a secret: the one rule for settings and
    environment variables alike (see :func:`is_secret_variable`)."""
    lowered = name.lower()
    if lowered.endswith(".location"):
        return False  # a path, not the secret itself
    return any(marker in lowered for marker in _SECRET_MARKERS)


def is_secret_variable(name: str) -> bool:
    """Whether an environment variable may hold a secret, by the same rule as settings:
    ``FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD``, ``FLUVIAL_KAFKA_ADMIN_PASSWORD`` and
    ``FLUVIAL_SERVE_TOKEN`` do; ``FLUVIAL_KAFKA_CLIENT_SSL_KEY_LOCATION`` (a path) does not."""
    return is_secret_setting(name.lower().replace("_", "."))


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """A copy safe to show: values of secret settings replaced by ``***``."""
    return {k: ("***" if is_secret_setting(k) else v) for k, v in settings.items()}
