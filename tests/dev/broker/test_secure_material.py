"""A secure broker's material made apart (``rollstream kafka secrets``) and read from elsewhere.

No broker: what is tested is the files, their modes and owners, and the broker's refusal of a
material directory that lacks any of them (test_secure_broker.py starts one on such a directory).
"""

from __future__ import annotations

import os
import socket
import ssl
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from rollstream.cli import cli
from rollstream.dev.broker.acls import plan, principals
from rollstream.dev.broker.secure import (
    ADMIN,
    SecureFiles,
    make_material,
    missing_material,
    ready_material,
)
from rollstream.errors import BrokerError
from rollstream.host import HOST

PRINCIPALS = principals(plan("rollstream"))


def test_made_apart_every_principal_has_a_private_password_and_repeating_keeps_them(
    tmp_path: Path,
) -> None:
    files = SecureFiles(tmp_path / "secrets")
    made = make_material(files, PRINCIPALS)
    assert missing_material(files, PRINCIPALS) == []
    assert set(made) >= {files.password_file(p) for p in [ADMIN, *PRINCIPALS]}
    for path in made:
        private = path != files.ca_cert  # the CA's certificate is public
        assert (path.stat().st_mode & 0o077 == 0) == private, path
    assert files.root.stat().st_mode & 0o777 == 0o700
    assert (files.root / "users").stat().st_mode & 0o777 == 0o700
    passwords = {p: files.password_file(p).read_text() for p in PRINCIPALS}
    assert len(set(passwords.values())) == len(PRINCIPALS)
    ca = files.ca_cert.read_bytes()
    make_material(files, PRINCIPALS)
    assert {p: files.password_file(p).read_text() for p in PRINCIPALS} == passwords
    assert files.ca_cert.read_bytes() == ca


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_owner_gets_every_file_but_the_ca_key(tmp_path: Path) -> None:
    files = SecureFiles(tmp_path / "secrets")
    made = make_material(files, PRINCIPALS, owner=(10001, 10002))
    for path in [*made, files.root, files.root / "users"]:
        owner = (path.stat().st_uid, path.stat().st_gid)
        assert owner == ((0, 0) if path == files.ca_key else (10001, 10002)), path


def test_the_cli_makes_them_and_refuses_a_bad_owner(tmp_path: Path) -> None:
    runner = CliRunner()
    bad = runner.invoke(cli, ["kafka", "secrets", str(tmp_path / "s"), "--owner", "me"])
    assert bad.exit_code == 2 and "is not UID[:GID]" in bad.output
    assert not (tmp_path / "s").exists()
    done = runner.invoke(cli, ["kafka", "secrets", str(tmp_path / "s")])
    assert done.exit_code == 0, done.output
    files = SecureFiles((tmp_path / "s").resolve())
    assert missing_material(files, PRINCIPALS) == []
    assert str(files.password_file("scorer")) in done.output.splitlines()
    # The paths, never a password.
    assert files.password_file("scorer").read_text().strip() not in done.output


def test_a_broker_given_material_lacking_anything_is_refused_by_name(tmp_path: Path) -> None:
    files = SecureFiles(tmp_path / "secrets", work=tmp_path / "kafka")
    make_material(files, PRINCIPALS)
    ready_material(files, PRINCIPALS, provided=True)
    files.password_file("scorer").unlink()
    files.broker_pem.unlink()
    with pytest.raises(BrokerError, match=r"lacks broker.pem, users/scorer: make them with"):
        ready_material(files, PRINCIPALS, provided=True)
    assert not files.broker_pem.exists()  # nothing made in a directory given
    ready_material(files, PRINCIPALS, provided=False)  # the broker's own: made
    assert files.broker_pem.exists()


def test_the_broker_certificate_passes_a_strict_verifier(tmp_path: Path) -> None:
    """Python 3.13's default context verifies X.509 strictly (key identifiers required)."""
    files = SecureFiles(tmp_path / "secrets")
    make_material(files, PRINCIPALS)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files.broker_pem)
    client = ssl.create_default_context(cafile=str(files.ca_cert))
    client.verify_flags |= ssl.VERIFY_X509_STRICT
    with socket.create_server((HOST, 0)) as listener:
        port = listener.getsockname()[1]
        accepted: list[Exception] = []

        def serve() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError) as exc:
                accepted.append(exc)

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with (
                socket.create_connection((HOST, port), timeout=10) as raw,
                client.wrap_socket(raw, server_hostname=HOST) as tls,
            ):
                assert tls.version() is not None
                tls.sendall(b"x")
        finally:
            thread.join(10)
    assert accepted == []
