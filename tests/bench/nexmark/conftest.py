"""The reference app's jar for the Nexmark comparison (built once per session)."""

from tests.reference.conftest import reference_jar  # noqa: F401 - a fixture, used by name
