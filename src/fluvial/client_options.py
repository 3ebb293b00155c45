"""The Kafka client settings that every ``fluvial`` command talking to a cluster takes.

They come from a file (``--client-config FILE`` or ``$FLUVIAL_KAFKA_CLIENT_CONFIG``) and from
``FLUVIAL_KAFKA_CLIENT_<SETTING>`` variables, never from the command line: a password there
would show in ``ps``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fluvial.errors import FluvialError

ClientConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--client-config",
        help="Kafka client settings (security.protocol, sasl.*, ssl.*; librdkafka key=value "
        "lines) (default: $FLUVIAL_KAFKA_CLIENT_CONFIG). FLUVIAL_KAFKA_CLIENT_<SETTING> "
        "variables override single settings, e.g. FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD. Never "
        "put a password on the command line.",
    ),
]


def client_settings_or_exit(path: Path | None) -> tuple[str | None, dict[str, str]]:
    """(bootstrap.servers if the settings name one, the other client settings); a settings
    file that cannot be read ends the command with the reason."""
    from fluvial.kafka.security import client_settings, split_bootstrap

    try:
        return split_bootstrap(client_settings(path))
    except FluvialError as error:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1) from None
