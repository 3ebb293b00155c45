"""``fluvial kafka start --secure`` as a user runs it: credentials from a file or from the
environment, client settings printed that connect (with the password supplied by the user),
never a password in the output, the logs or a command line, and only 127.0.0.1 listening."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from fluvial.iq.server import TOKEN_ENV
from fluvial.kafka import free_port
from fluvial.kafka.security import (
    ADMIN_PASSWORD_ENV,
    NEW_USER_PASSWORD_ENV,
    SCRAM_MECHANISM,
    KafkaSecurityError,
    check_connection,
)
from tests.kafka.test_cli_kafka import fluvial, java_processes_using
from tests.security.test_child_environments import holding, java_home_wrapper, recorded

# Making the CA and the broker's certificate, then a JVM start, on a loaded machine.
pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]


def printed_settings(stderr: str) -> dict[str, str]:
    """The ``  key=value`` lines under "client settings (librdkafka):"."""
    _before, marker, after = stderr.partition("client settings (librdkafka):")
    assert marker, stderr
    settings = {}
    for line in after.splitlines()[1:]:
        found = re.fullmatch(r"  ([a-z.]+)=(\S+).*", line)
        if found is None:
            break
        settings[found[1]] = found[2]
    return settings


def listening_addresses(pid: int) -> set[str]:
    """The local addresses (``ip:port``) of every TCP socket ``pid`` listens on."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                address, port = local.split(":")
                found.add(f"{_ip(address)}:{int(port, 16)}")
    return found


def _ip(hex_address: str) -> str:
    """An address of /proc/net/tcp{,6}; an IPv4-mapped IPv6 address as its IPv4 form."""
    raw = bytes.fromhex(hex_address)
    words = [raw[i : i + 4][::-1] for i in range(0, len(raw), 4)]  # host-order 32-bit words
    flat = b"".join(words)
    if len(flat) == 16 and flat[:12] == b"\0" * 10 + b"\xff\xff":
        flat = flat[12:]
    if len(flat) == 4:
        return ".".join(str(b) for b in flat)
    return ":".join(flat[i : i + 2].hex() for i in range(0, 16, 2))


@pytest.mark.parametrize("source", ["file", pytest.param("environment", marks=pytest.mark.soak)])
def test_secure_start_prints_settings_that_connect_and_never_a_password(
    source: str, tmp_path: Path, fluvial_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data_dir = tmp_path / "secured"
    port = free_port()
    where = ["--data-dir", str(data_dir), "--port", str(port)]
    admin_password = secrets.token_urlsafe(18)
    reader_password = secrets.token_urlsafe(18)
    passwords = [admin_password, reader_password]
    monkeypatch.delenv(ADMIN_PASSWORD_ENV, raising=False)
    # Every java and keytool the CLI runs records the environment it was given; secrets of
    # other kinds sit in the CLI's environment beside the admin's.
    java_home, records = java_home_wrapper(tmp_path)
    monkeypatch.setenv("JAVA_HOME", str(java_home))
    other_secrets = {
        "FLUVIAL_KAFKA_CLIENT_SASL_PASSWORD": secrets.token_urlsafe(18),
        TOKEN_ENV: secrets.token_urlsafe(18),
    }
    for name, value in other_secrets.items():
        monkeypatch.setenv(name, value)
    if source == "file":
        credentials = tmp_path / "credentials"
        credentials.write_text(f"admin={admin_password}\nreader={reader_password}\n")
        how = ["--credentials-file", str(credentials)]
    else:
        monkeypatch.setenv(ADMIN_PASSWORD_ENV, admin_password)  # as a secret store injects it
        how = []

    outputs: dict[str, str] = {}
    try:
        started = fluvial("kafka", "start", "--secure", *where, *how, "--heap", "512m")
        outputs["start"] = started.stdout + started.stderr
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip()
        assert bootstrap == f"127.0.0.1:{port}"

        printed = printed_settings(started.stderr)
        assert printed == {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": SCRAM_MECHANISM,
            "ssl.ca.location": printed["ssl.ca.location"],
            "sasl.username": "admin",
        }
        assert Path(printed["ssl.ca.location"]).is_file()
        assert Path(printed["ssl.ca.location"]).is_relative_to(data_dir)
        # The settings printed, and the password the user holds, are all a client needs.
        users = {"admin": admin_password}
        if source == "file":
            users["reader"] = reader_password  # the file's other users are created too
        for user, password in users.items():
            admin = AdminClient({**printed, "sasl.username": user, "sasl.password": password})
            metadata = admin.list_topics(timeout=60)
            assert metadata.brokers, f"{user} connects"
        settings = {k: v for k, v in printed.items() if k != "bootstrap.servers"}
        with pytest.raises(KafkaSecurityError, match="authentication failed"):
            check_connection(bootstrap, {**settings, "sasl.password": "not-" + admin_password})

        brokers = java_processes_using(data_dir)
        assert len(brokers) == 1, brokers
        outputs["broker command line"] = brokers[0]
        pid = int(brokers[0].split()[0])
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        assert admin_password not in environ, "the broker holds no password in its environment"
        listening = listening_addresses(pid)
        assert f"127.0.0.1:{port}" in listening, listening
        assert {address.rpartition(":")[0] for address in listening} == {"127.0.0.1"}, listening

        # A user added to the running cluster, its password from a file, then changed from the
        # environment: it connects with the password it was last given.
        password_file = tmp_path / "app.password"
        password_file.write_text(secrets.token_urlsafe(18) + "\n")
        added = fluvial("kafka", "add-user", "app", *where, "--password-file", str(password_file))
        outputs["add-user from a file"] = added.stdout + added.stderr
        assert added.returncode == 0 and "User:app" in added.stderr, added.stderr
        app_password = secrets.token_urlsafe(18)
        passwords.append(app_password)
        monkeypatch.setenv(NEW_USER_PASSWORD_ENV, app_password)
        changed = fluvial("kafka", "add-user", "app", *where)
        outputs["add-user from the environment"] = changed.stdout + changed.stderr
        assert changed.returncode == 0, changed.stderr
        check_connection(bootstrap, {**settings, "sasl.username": "app",
                                     "sasl.password": app_password})  # fmt: skip
        monkeypatch.setenv(NEW_USER_PASSWORD_ENV, "short")
        refused = fluvial("kafka", "add-user", "app", *where)
        assert refused.returncode == 1 and "at least 8 characters" in refused.stderr

        again = fluvial("kafka", "start", "--secure", *where)
        outputs["second start"] = again.stdout + again.stderr
        assert again.returncode == 0 and "already running" in again.stderr, again.stderr
        assert printed_settings(again.stderr) == printed

        logs = fluvial("kafka", "logs", *where, "-n", "1000000")
        outputs["logs"] = logs.stdout + logs.stderr
        assert logs.returncode == 0 and "SASL_SSL" in logs.stdout
    finally:
        stop = fluvial("kafka", "stop", *where)
        outputs["stop"] = stop.stdout + stop.stderr
    assert stop.returncode == 0, stop.stderr
    assert java_processes_using(data_dir) == [], "stop leaves no broker behind"

    # java -version, seven keytool runs, the storage-format JVM and the broker, each seen.
    seen = recorded(records)
    assert sum(name.startswith("keytool-") for name in seen) == 7, seen.keys()
    assert sum(name.startswith("java-") for name in seen) >= 3, seen.keys()
    every_secret = {ADMIN_PASSWORD_ENV: admin_password, **other_secrets}
    assert holding(seen, every_secret) == [], "no child of kafka start holds a secret"

    for path in data_dir.rglob("*.log"):  # the brokers' logs and their stdout
        outputs[str(path)] = path.read_text(errors="replace")
    for where_, text in outputs.items():
        for password in passwords:
            assert password not in text, f"a password shows in {where_}"
        assert "PRIVATE KEY" not in text, f"key material shows in {where_}"
    admin_file = data_dir / "security" / "admin.properties"
    assert admin_file.stat().st_mode & 0o777 == 0o600  # the one place that holds it
