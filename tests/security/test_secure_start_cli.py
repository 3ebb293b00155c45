"""``fluvial kafka start --secure`` as a user runs it: credentials from a file or from the
environment, client settings printed that connect (with the password supplied by the user),
never a password in the output, the logs or a command line, and only 127.0.0.1 listening."""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from fluvial.kafka import free_port
from fluvial.kafka.security import (
    ADMIN_PASSWORD_ENV,
    SCRAM_MECHANISM,
    KafkaSecurityError,
    check_connection,
)
from tests.kafka.test_cli_kafka import fluvial, java_processes_using

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


@pytest.mark.parametrize("source", ["file", "environment"])
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

    for path in data_dir.rglob("*.log"):  # the brokers' logs and their stdout
        outputs[str(path)] = path.read_text(errors="replace")
    for where_, text in outputs.items():
        for password in passwords:
            assert password not in text, f"a password shows in {where_}"
        assert "PRIVATE KEY" not in text, f"key material shows in {where_}"
    admin_file = data_dir / "security" / "admin.properties"
    assert admin_file.stat().st_mode & 0o777 == 0o600  # the one place that holds it
