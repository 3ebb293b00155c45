"""Kafka security for fluvial: client settings from a file or the environment, their Java form
for Spark's Kafka connector, clear authentication errors, and the secured local cluster's TLS
material and SCRAM users.

Secrets (passwords, keys) travel in files and environment variables only, never on a command
line, and never in a log line: :func:`fluvial.redaction.redacted` is what may be shown.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fluvial import children
from fluvial.errors import ConfigError, FluvialError, KafkaSetupError, StreamsError
from fluvial.redaction import is_secret_setting

SCRAM_MECHANISM = "SCRAM-SHA-512"
#: A librdkafka properties file (``key=value`` lines) with the client settings.
CLIENT_CONFIG_ENV = "FLUVIAL_KAFKA_CLIENT_CONFIG"
#: ``FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD=...`` sets ``sasl.password``, and so on.
CLIENT_SETTING_ENV_PREFIX = "FLUVIAL_KAFKA_CLIENT_"
#: The local secured cluster's admin password, when no credentials file is given.
ADMIN_PASSWORD_ENV = "FLUVIAL_KAFKA_ADMIN_PASSWORD"
#: The password of a user ``fluvial kafka add-user`` adds, when no password file is given.
NEW_USER_PASSWORD_ENV = "FLUVIAL_KAFKA_USER_PASSWORD"

# -- client settings ------------------------------------------------------------------------------


def read_properties(path: Path) -> dict[str, str]:
    """``key=value`` lines; ``#`` and ``!`` start comments (the Java and librdkafka format)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ConfigError(f"cannot read client settings file {path}: {error.strerror}") from None
    settings = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = line.partition("=")
        if not sep:
            # Never echo the line: it may hold a password.
            raise ConfigError(f"{path}, line {number}: expected key=value")
        settings[key.strip()] = value.strip()
    return settings


def client_settings(
    path: str | Path | None = None, env: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Client settings from ``path`` (or ``$FLUVIAL_KAFKA_CLIENT_CONFIG``), then the
    environment's ``FLUVIAL_KAFKA_CLIENT_<SETTING>`` variables over them.

    May include ``bootstrap.servers``; see :func:`split_bootstrap`.
    """
    env = os.environ if env is None else env
    settings: dict[str, str] = {}
    chosen = path or env.get(CLIENT_CONFIG_ENV)
    if chosen:
        settings.update(read_properties(Path(chosen)))
    for name, value in env.items():
        if name.startswith(CLIENT_SETTING_ENV_PREFIX) and name != CLIENT_CONFIG_ENV:
            key = name[len(CLIENT_SETTING_ENV_PREFIX) :].lower().replace("_", ".")
            if key:
                settings[key] = value
    return settings


def split_bootstrap(settings: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """``bootstrap.servers`` apart from the other settings (fluvial keeps it in its own field)."""
    rest = dict(settings)
    return rest.pop("bootstrap.servers", None), rest


def is_secured(settings: Mapping[str, Any]) -> bool:
    protocol = str(settings.get("security.protocol", "plaintext")).upper()
    return protocol != "PLAINTEXT"


def principal_of(settings: Mapping[str, Any]) -> str | None:
    """``User:NAME`` for SASL settings with a user name."""
    user = settings.get("sasl.username")
    return f"User:{user}" if user else None


#: librdkafka's client-certificate settings (mutual TLS): the Java client keeps the key and the
#: chain in one keystore, which fluvial cannot derive from them.
_CLIENT_CERTIFICATE_SETTINGS = (
    "ssl.certificate.location",
    "ssl.certificate.pem",
    "ssl.key.location",
    "ssl.key.pem",
    "ssl.keystore.location",
)


def java_client_options(
    settings: Mapping[str, Any], prefix: str = "kafka.", *, overrides: Iterable[str] = ()
) -> dict[str, str]:
    """The same security settings for Kafka's Java clients (Spark's Kafka connector).

    librdkafka spells SASL credentials as ``sasl.username``/``sasl.password`` and a PEM CA as
    ``ssl.ca.location`` (a file) or ``ssl.ca.pem`` (the certificates themselves); the Java
    client wants a JAAS line and a PEM truststore. A client certificate (mutual TLS) has no
    derived form: unless ``overrides`` (the Java options the caller sets itself) hold a
    ``ssl.keystore.*`` option, it is a :class:`~fluvial.errors.ConfigError` rather than a
    connection that fails later without saying why.
    """
    certificate = [k for k in _CLIENT_CERTIFICATE_SETTINGS if k in settings]
    if certificate and not any(
        k.removeprefix("kafka.").startswith("ssl.keystore.") for k in overrides
    ):
        raise ConfigError(
            f"{', '.join(certificate)}: a client certificate has no Java form fluvial can "
            "derive for Spark's Kafka connector: pass its keystore yourself (kafka.ssl.keystore."
            "type, kafka.ssl.keystore.location or kafka.ssl.keystore.key and "
            "kafka.ssl.keystore.certificate.chain)"
        )
    options: dict[str, str] = {}
    passthrough = (
        "security.protocol",
        "sasl.mechanism",
        "ssl.endpoint.identification.algorithm",
    )
    for key in passthrough:
        if key in settings:
            options[key] = str(settings[key])
    if "sasl.mechanisms" in settings and "sasl.mechanism" not in options:
        options["sasl.mechanism"] = str(settings["sasl.mechanisms"])
    if options.get("ssl.endpoint.identification.algorithm") == "none":
        options["ssl.endpoint.identification.algorithm"] = ""
    user, password = settings.get("sasl.username"), settings.get("sasl.password")
    if user is not None and password is not None:
        mechanism = options.get("sasl.mechanism", "GSSAPI").upper()
        module = {
            "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
            "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
            "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
        }.get(mechanism)
        if module is None:
            raise ConfigError(
                f"sasl.mechanism {mechanism} has no Java equivalent fluvial can derive: pass "
                "kafka.sasl.jaas.config to Spark's Kafka connector yourself"
            )
        options["sasl.jaas.config"] = (
            f'{module} required username="{_jaas_quote(str(user))}" '
            f'password="{_jaas_quote(str(password))}";'
        )
    if "ssl.ca.location" in settings:
        options["ssl.truststore.type"] = "PEM"
        options["ssl.truststore.location"] = str(settings["ssl.ca.location"])
    elif "ssl.ca.pem" in settings:
        options["ssl.truststore.type"] = "PEM"
        options["ssl.truststore.certificates"] = str(settings["ssl.ca.pem"])
    return {f"{prefix}{k}": v for k, v in options.items()}


def _jaas_quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


# -- clear errors ---------------------------------------------------------------------------------


class KafkaSecurityError(FluvialError):
    """Kafka refused the client: wrong credentials, an untrusted certificate, or missing ACLs."""


class AuthorizationError(KafkaSecurityError, StreamsError):
    """The application's principal lacks an ACL it needs. Fatal: retrying cannot grant it, so
    engines stop the application instead of restarting its workers."""


def listener_protocol(address: str, timeout_s: float = 3.0) -> str | None:
    """The ``security.protocol`` the listener at ``host:port`` speaks, found by asking it, or
    None when it cannot be told (nothing listens, or no answer in time).

    TLS is tried first (a plaintext listener drops the handshake at once); then a metadata
    request: only a SASL listener refuses it before authentication, by closing the connection.
    """
    host, _, port_text = address.strip().rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        return None
    host = host.strip("[]") or "127.0.0.1"
    over_tls = _ask_metadata(host, port, timeout_s, tls=True)
    if over_tls == "no-tls":
        plain = _ask_metadata(host, port, timeout_s, tls=False)
        return {"answered": "PLAINTEXT", "closed": "SASL_PLAINTEXT"}.get(plain)
    return {"answered": "SSL", "closed": "SASL_SSL"}.get(over_tls)


def _ask_metadata(host: str, port: int, timeout_s: float, *, tls: bool) -> str:
    """Send a metadata request (API key 3, version 0, all topics): "answered", "closed"
    (the listener hung up), "no-tls" (with ``tls``: the handshake failed), or "unknown"."""
    import socket
    import ssl
    import struct

    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return "unknown"
    try:
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE  # only the protocol is asked here, not trust
            try:
                sock = context.wrap_socket(sock)
            except (ssl.SSLError, ConnectionError):
                return "no-tls"
            except OSError:
                return "unknown"
        client_id = b"fluvial-protocol-check"
        body = struct.pack(">hhih", 3, 0, 1, len(client_id)) + client_id + struct.pack(">i", 0)
        try:
            sock.sendall(struct.pack(">i", len(body)) + body)
            return "answered" if sock.recv(4) else "closed"
        except TimeoutError:
            return "unknown"
        except OSError:
            return "closed"
    finally:
        sock.close()


def check_listener(bootstrap_servers: str, settings: Mapping[str, Any]) -> None:
    """Refuse at once, naming the setting, a ``security.protocol`` that the listener at the
    first bootstrap address does not speak: librdkafka would only log disconnects."""
    configured = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    address = bootstrap_servers.split(",")[0]
    expected = listener_protocol(address)
    if expected is None or expected == configured:
        return
    needs = {
        "PLAINTEXT": "",
        "SSL": " with ssl.ca.location (the CA that signed the brokers' certificates)",
        "SASL_PLAINTEXT": " with sasl.mechanism, sasl.username and sasl.password",
        "SASL_SSL": " with sasl.mechanism, sasl.username, sasl.password and ssl.ca.location",
    }[expected]
    raise KafkaSecurityError(
        f"security.protocol is {configured} but the listener at {address} expects {expected}: "
        f"set security.protocol={expected}{needs} in your client settings (--client-config "
        f"or {CLIENT_CONFIG_ENV})"
    )


def check_connection(
    bootstrap_servers: str, settings: Mapping[str, Any], timeout_s: float = 20.0
) -> None:
    """Check the listener's protocol; with security settings, also connect once, turning an
    authentication or TLS failure into a clear error, fast.

    librdkafka retries a failed SASL handshake for ever, and meets a listener of another
    protocol with disconnects only, so without this check a wrong password or protocol looks
    like a cluster that does not answer.
    """
    check_listener(bootstrap_servers, settings)
    if not is_secured(settings):
        return
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    failures: list[KafkaError] = []
    failed = threading.Event()

    def on_error(error: KafkaError) -> None:
        if error.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            failures.append(error)
            failed.set()

    # dict[str, Any]: librdkafka settings, callbacks among them.
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap_servers, **settings, "error_cb": on_error, "log_level": 0
    }  # fmt: skip
    admin = AdminClient(config)
    result: list[BaseException] = []

    done = threading.Event()

    def probe() -> None:
        # Short calls, so that the probe ends soon after a failure is known: a thread still
        # inside librdkafka when the process exits would crash it (SIGSEGV at exit).
        end = time.monotonic() + timeout_s
        while True:
            try:
                admin.list_topics(timeout=1.0)
                break
            except BaseException as error:  # noqa: BLE001 - reported below
                if done.is_set() or time.monotonic() >= end:
                    result.append(error)
                    break
        failed.set()

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    deadline = time.monotonic() + timeout_s + 5
    # Error callbacks are delivered by poll(): poll until the probe ends or one fails.
    while not failed.is_set() and time.monotonic() < deadline:
        admin.poll(0.1)
    admin.poll(0)
    done.set()
    prober.join(10)
    if failures:
        raise _explain(failures[0], bootstrap_servers, settings)
    if result:
        from confluent_kafka import KafkaException

        error = result[0]
        if isinstance(error, KafkaException):
            raise FluvialError(
                f"cannot reach Kafka at {bootstrap_servers}: {error.args[0].str()}"
            ) from None
        raise error


def _explain(error: Any, bootstrap: str, settings: Mapping[str, Any]) -> KafkaSecurityError:
    from confluent_kafka import KafkaError

    if error.code() == KafkaError._AUTHENTICATION:
        user = settings.get("sasl.username", "?")
        mechanism = settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "?"))
        return KafkaSecurityError(
            f"authentication failed at {bootstrap} for SASL user {user!r} ({mechanism}): "
            f"{_without_secrets(error.str(), settings)}. Check sasl.username and sasl.password "
            f"in your client settings (--client-config or {CLIENT_CONFIG_ENV})"
        )
    return KafkaSecurityError(
        f"TLS to {bootstrap} failed: {_without_secrets(error.str(), settings)}. Check "
        "ssl.ca.location (the CA that signed the brokers' certificates) and security.protocol"
    )


def _without_secrets(text: str, settings: Mapping[str, Any]) -> str:
    for key, value in settings.items():
        if is_secret_setting(key) and value:
            text = text.replace(str(value), "***")
    return text


# -- the secured local cluster --------------------------------------------------------------------

_ALLOWED_PASSWORD = re.compile(r"^[A-Za-z0-9!$%&()*+./:;<>?@^_{|}~-]{8,}$")
BROKER_DN = "CN=fluvial-local-broker"


@dataclass(frozen=True)
class Credentials:
    """SCRAM users of the local cluster; ``admin`` is its super-user."""

    admin: str
    passwords: dict[str, str] = field(repr=False)

    def __repr__(self) -> str:
        return f"Credentials(admin={self.admin!r}, users={sorted(self.passwords)})"

    @property
    def admin_password(self) -> str:
        return self.passwords[self.admin]


def read_credentials(
    path: str | Path | None = None,
    *,
    admin: str = "admin",
    env: Mapping[str, str] | None = None,
) -> Credentials:
    """Users from a ``NAME=PASSWORD`` file, or the admin's password from the environment."""
    env = os.environ if env is None else env
    passwords: dict[str, str] = {}
    if path is not None:
        passwords = read_properties(Path(path))
    elif env.get(ADMIN_PASSWORD_ENV):
        passwords = {admin: env[ADMIN_PASSWORD_ENV]}
    else:
        raise ConfigError(
            f"a secured cluster needs credentials: give --credentials-file FILE (NAME=PASSWORD "
            f"lines, one of them for {admin!r}) or set {ADMIN_PASSWORD_ENV}"
        )
    if admin not in passwords:
        raise ConfigError(f"the credentials name no password for the admin user {admin!r}")
    for user, password in passwords.items():
        _check_user(user, password)
    return Credentials(admin, passwords)


def read_user_password(
    user: str, path: str | Path | None = None, *, env: Mapping[str, str] | None = None
) -> str:
    """The password of a new user: the first line of ``path``, else
    ``$FLUVIAL_KAFKA_USER_PASSWORD``; never a command-line argument (``ps`` would show it)."""
    env = os.environ if env is None else env
    if path is not None:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError as error:
            raise ConfigError(f"cannot read the password file {path}: {error.strerror}") from None
        password = lines[0].strip() if lines else ""
    else:
        password = env.get(NEW_USER_PASSWORD_ENV, "")
    if not password:
        raise ConfigError(
            f"no password for {user!r}: give --password-file FILE (the password on its first "
            f"line) or set {NEW_USER_PASSWORD_ENV}"
        )
    _check_user(user, password)
    return password


def _check_user(user: str, password: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9._-]+", user):
        raise ConfigError(f"user name {user!r}: use letters, digits, '.', '_' and '-'")
    if not _ALLOWED_PASSWORD.match(password):
        raise ConfigError(
            f"the password of {user!r} must be at least 8 characters of letters, digits "
            "and punctuation other than quotes, backslash, '#', ',', '=' and brackets"
        )


@dataclass(frozen=True)
class TlsFiles:
    directory: Path

    @property
    def ca_pem(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def ca_store(self) -> Path:
        return self.directory / "ca.p12"

    @property
    def keystore(self) -> Path:
        return self.directory / "broker.p12"

    @property
    def store_password_file(self) -> Path:
        return self.directory / "store.password"

    @property
    def admin_properties(self) -> Path:
        return self.directory / "admin.properties"

    def store_password(self) -> str:
        return self.store_password_file.read_text().strip()


def _private_file(path: Path, text: str) -> None:
    """Write a file only its owner can read, without a moment of wider permissions."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)


def ensure_tls(directory: Path, java: str) -> TlsFiles:
    """A CA and a broker certificate for 127.0.0.1, made once with the JDK's keytool.

    Store passwords are read by keytool from a file (``-storepass:file``), never from its
    command line.
    """
    tls = TlsFiles(directory)
    if tls.ca_pem.exists() and tls.keystore.exists() and tls.store_password_file.exists():
        return tls
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    keytool = str(Path(java).resolve().parent / "keytool")
    if not Path(keytool).exists():
        keytool = shutil.which("keytool") or keytool
    for stale in (tls.ca_pem, tls.ca_store, tls.keystore):
        stale.unlink(missing_ok=True)
    _private_file(tls.store_password_file, secrets.token_urlsafe(24))
    pw = ["-storepass:file", str(tls.store_password_file)]
    csr, signed = directory / "broker.csr", directory / "broker.pem"
    steps = [
        ["-genkeypair", "-alias", "ca", "-keyalg", "RSA", "-keysize", "2048", "-validity", "3650",
         "-dname", "CN=fluvial-local-ca", "-ext", "bc:c", "-storetype", "PKCS12",
         "-keystore", str(tls.ca_store), *pw],
        ["-exportcert", "-rfc", "-alias", "ca", "-keystore", str(tls.ca_store), *pw,
         "-file", str(tls.ca_pem)],
        ["-genkeypair", "-alias", "broker", "-keyalg", "RSA", "-keysize", "2048",
         "-validity", "3650", "-dname", BROKER_DN, "-storetype", "PKCS12",
         "-keystore", str(tls.keystore), *pw],
        ["-certreq", "-alias", "broker", "-keystore", str(tls.keystore), *pw, "-file", str(csr)],
        ["-gencert", "-alias", "ca", "-keystore", str(tls.ca_store), *pw, "-rfc",
         "-validity", "3650", "-infile", str(csr), "-outfile", str(signed),
         "-ext", "SAN=ip:127.0.0.1,dns:localhost", "-ext", "EKU=serverAuth,clientAuth"],
        ["-importcert", "-noprompt", "-alias", "ca", "-file", str(tls.ca_pem),
         "-keystore", str(tls.keystore), *pw],
        ["-importcert", "-noprompt", "-alias", "broker", "-file", str(signed),
         "-keystore", str(tls.keystore), *pw],
    ]  # fmt: skip
    for step in steps:
        result = children.run([keytool, *step], capture_output=True, text=True)
        if result.returncode != 0:
            raise KafkaSetupError(
                f"keytool {step[0]} failed while making the local CA in {directory}: "
                f"{(result.stderr or result.stdout).strip()[-600:]}"
            )
    csr.unlink(missing_ok=True)
    signed.unlink(missing_ok=True)
    for path in (tls.ca_store, tls.keystore):
        os.chmod(path, 0o600)
    return tls


def client_properties(tls: TlsFiles, user: str, password: str | None) -> dict[str, str]:
    settings = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": SCRAM_MECHANISM,
        "ssl.ca.location": str(tls.ca_pem),
        "sasl.username": user,
    }
    if password is not None:
        settings["sasl.password"] = password
    return settings


def write_client_properties(path: Path, bootstrap: str, settings: Mapping[str, str]) -> None:
    lines = [f"bootstrap.servers={bootstrap}"] + [f"{k}={v}" for k, v in settings.items()]
    _private_file(path, "\n".join(lines) + "\n")


def broker_security_properties(
    tls: TlsFiles, credentials: Credentials, *, port: int, controller_port: int, host: str
) -> dict[str, str | int]:
    """server.properties entries of one secured node.

    Clients and brokers meet on SASL_SSL with SCRAM-SHA-512. The controller listener uses
    mutual TLS (SCRAM users live in the metadata log, which the controllers serve), and the
    brokers' certificate is a super-user so that they may replicate and report to it.
    """
    store_password = tls.store_password()
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{credentials.admin}" password="{credentials.admin_password}";'
    )
    return {
        "listeners": f"SASL_SSL://{host}:{port},CONTROLLER://{host}:{controller_port}",
        "advertised.listeners": f"SASL_SSL://{host}:{port}",
        "inter.broker.listener.name": "SASL_SSL",
        "listener.security.protocol.map": "SASL_SSL:SASL_SSL,CONTROLLER:SSL",
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        "sasl.mechanism.inter.broker.protocol": SCRAM_MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
        "listener.name.controller.ssl.client.auth": "required",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(tls.keystore),
        "ssl.keystore.password": store_password,
        "ssl.key.password": store_password,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(tls.ca_pem),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{credentials.admin};User:{BROKER_DN}",
        "allow.everyone.if.no.acl.found": "false",
    }


def upsert_scram_users(
    bootstrap: str, admin_settings: Mapping[str, str], passwords: Mapping[str, str]
) -> None:
    """Create or update SCRAM-SHA-512 users (through the admin's own connection)."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialAlteration,
        UserScramCredentialUpsertion,
    )

    if not passwords:
        return
    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_settings})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    changes: list[UserScramCredentialAlteration] = [
        UserScramCredentialUpsertion(user, info, password.encode())
        for user, password in passwords.items()
    ]
    for user, future in admin.alter_user_scram_credentials(changes).items():
        try:
            future.result()
        except Exception as error:  # noqa: BLE001 - re-raised with the user named
            raise KafkaSetupError(
                f"could not set the SCRAM credentials of {user!r}: {error}"
            ) from None
