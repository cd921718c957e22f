"""The local broker as real clusters run it: TLS, SCRAM-SHA-512 users and ACLs.

``rollstream kafka start --secure`` keeps under ``<data dir>/secure/``:

- ``ca.pem`` (the CA clients verify the broker with; its key ``ca.key`` stays beside it),
  ``broker.pem`` (the broker's key and certificate for ``127.0.0.1`` and ``localhost``);
- ``users/<principal>``: one password per principal (mode 0600), made once.

``rollstream kafka secrets DIR`` makes the same files in a directory of their own, for a broker
that reads them from a read-only mount (Compose's secure-kafka.yml, ``ROLLSTREAM_KAFKA_SECURE_DIR``)
while each service mounts its own password alone. What the broker writes itself (the storage
tool's arguments, the applied ACL table's digest) goes to its data directory, never into the
material's.

The client listener is SASL_SSL with SCRAM-SHA-512 only; the controller listener is TLS with
client certificates (KRaft controllers take no SCRAM), so the broker authenticates to its own
controller as ``User:CN=broker``. Users are written into the metadata when the data directory is
formatted (``--add-scram``), so a secure data directory is made secure from its first start.
ACLs: ``acls.py``.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from pydantic import SecretStr

from rollstream.dev.broker.config import BrokerLayout
from rollstream.errors import BrokerError
from rollstream.host import HOST
from rollstream.http_auth import token_file
from rollstream.settings import KafkaSettings

#: The user every other principal's ACLs are made with (``super.users``), and the broker's own.
ADMIN = "admin"
BROKER_PRINCIPAL = "User:CN=broker"
MECHANISM = "SCRAM-SHA-512"
_VALID_DAYS = 3650


@dataclass(frozen=True)
class SecureFiles:
    """Where one secure broker keeps its CA, its certificate and its users' passwords.

    ``work`` is where the broker writes files of its own (default: ``root``), so that ``root``
    may be read-only.
    """

    root: Path
    work: Path | None = None

    @property
    def work_dir(self) -> Path:
        """Where the broker writes its own files (format arguments, the ACL step's)."""
        return self.work or self.root

    @property
    def ca_cert(self) -> Path:
        """The CA certificate clients verify the broker with (``ROLLSTREAM_SSL_CAFILE``)."""
        return self.root / "ca.pem"

    @property
    def ca_key(self) -> Path:
        """The CA's private key (mode 0600)."""
        return self.root / "ca.key"

    @property
    def broker_pem(self) -> Path:
        """The broker's private key and certificate chain, one PEM file (mode 0600)."""
        return self.root / "broker.pem"

    def password_file(self, principal: str) -> Path:
        """Where ``principal``'s password is kept (mode 0600)."""
        return self.root / "users" / principal

    def password(self, principal: str) -> SecretStr:
        """``principal``'s password, made on first use."""
        return token_file(self.password_file(principal))


def broker_files(secure_dir: Path | None, data_dir: Path) -> SecureFiles:
    """A broker's material: in ``secure_dir`` if given, else its data directory's ``secure``.

    The broker's own files go to its data directory either way.
    """
    return SecureFiles(secure_dir or data_dir / "secure", work=data_dir)


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner alone (mode 0600 before any byte)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_bytes(data)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def ensure_material(files: SecureFiles) -> None:
    """Make the CA and the broker's certificate if missing (kept across restarts)."""
    if files.ca_cert.exists() and files.broker_pem.exists():
        return
    now = datetime.datetime.now(datetime.UTC)
    valid = {"not_valid_before": now - datetime.timedelta(minutes=5)}
    valid["not_valid_after"] = now + datetime.timedelta(days=_VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("rollstream local CA")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid["not_valid_before"])
        .not_valid_after(valid["not_valid_after"])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        # Key identifiers: verifiers in strict mode (Python 3.13's default context) refuse a
        # chain without them ("Missing Authority Key Identifier").
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    broker = (
        x509.CertificateBuilder()
        .subject_name(_name("broker"))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid["not_valid_before"])
        .not_valid_after(valid["not_valid_after"])
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]
            ),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        # Server to its clients, and client to its own controller (mTLS).
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    write_private(files.ca_key, _pem_key(ca_key))
    chain = broker.public_bytes(pem) + ca.public_bytes(pem)
    write_private(files.broker_pem, _pem_key(key) + chain)
    files.ca_cert.write_bytes(ca.public_bytes(pem))


def missing_material(files: SecureFiles, principals: list[str]) -> list[Path]:
    """What a broker needs of ``files`` that is not there (its certificates, each password)."""
    needed = [files.ca_cert, files.broker_pem]
    needed += [files.password_file(p) for p in [ADMIN, *principals]]
    return [path for path in needed if not path.is_file()]


def ready_material(files: SecureFiles, principals: list[str], *, provided: bool) -> None:
    """Make what the broker needs, or with ``provided`` (made apart) refuse what lacks any."""
    if not provided:
        ensure_material(files)
        return
    missing = missing_material(files, principals)
    if missing:
        names = ", ".join(str(path.relative_to(files.root)) for path in missing)
        raise BrokerError(
            f"ROLLSTREAM_KAFKA_SECURE_DIR={files.root} lacks {names}: make them with "
            f"`rollstream kafka secrets {files.root}`"
        )


def make_material(
    files: SecureFiles, principals: list[str], owner: tuple[int, int] | None = None
) -> list[Path]:
    """The CA, the broker's certificate and every principal's password in ``files.root``.

    What exists is kept. The directories are the owner's alone (0700); with ``owner``
    (uid, gid) every file but the CA's key is given to that user, e.g. the user a container
    runs as, which reads its bind-mounted secret with the host file's owner and mode. Returns
    the files made or kept.
    """
    ensure_material(files)
    for principal in [ADMIN, *principals]:
        files.password(principal)
    made = [files.ca_cert, files.broker_pem, files.ca_key]
    made += [files.password_file(p) for p in [ADMIN, *principals]]
    for directory in (files.root, files.root / "users"):
        directory.chmod(0o700)
        if owner is not None:
            os.chown(directory, *owner)
    if owner is not None:
        for path in made:
            if path != files.ca_key:  # signs certificates: no service needs it
                os.chown(path, *owner)
    return made


def _jaas(user: str, password: SecretStr) -> str:
    secret = password.get_secret_value()
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{user}" password="{secret}";'
    )


def secure_overrides(layout: BrokerLayout, files: SecureFiles) -> dict[str, str]:
    """server.properties entries that make ``layout``'s broker SASL_SSL-only with ACLs."""
    client = f"SASL_SSL://{HOST}:{layout.port}"
    controller = f"CONTROLLER://{HOST}:{layout.controller_port}"
    return {
        "listeners": f"{client},{controller}",
        "advertised.listeners": f"{client},{controller}",
        "listener.security.protocol.map": "CONTROLLER:SSL,SASL_SSL:SASL_SSL",
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": MECHANISM,
        "sasl.mechanism.inter.broker.protocol": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": _jaas(
            ADMIN, files.password(ADMIN)
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(files.broker_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(files.ca_cert),
        "listener.name.controller.ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};{BROKER_PRINCIPAL}",
        "allow.everyone.if.no.acl.found": "false",
    }


def scram_argfile(files: SecureFiles, principals: list[str]) -> Path:
    """The storage tool's ``--add-scram`` arguments in a file of mode 0600, for ``java @file``.

    Every principal's SCRAM credential; in a file, not on the command line, where any local
    user could read the passwords from ``/proc/<pid>/cmdline``.
    """
    lines = []
    for principal in [ADMIN, *principals]:
        secret = files.password(principal).get_secret_value()
        lines += ["--add-scram", f"{MECHANISM}=[name={principal},password={secret}]"]
    path = files.work_dir / "format.args"
    write_private(path, ("\n".join(lines) + "\n").encode())
    return path


def secure_client(files: SecureFiles, principal: str, bootstrap: str = "") -> KafkaSettings:
    """Rollstream's client settings as ``principal`` of the secure broker at ``bootstrap``."""
    return KafkaSettings(
        bootstrap_servers=bootstrap or f"{HOST}:0",
        security_protocol="SASL_SSL",
        sasl_mechanism=MECHANISM,
        sasl_username=principal,
        sasl_password=files.password(principal),
        ssl_cafile=files.ca_cert,
    )


def client_env(files: SecureFiles, principal: str) -> dict[str, str]:
    """The ``ROLLSTREAM_*`` variables a service connects as ``principal`` with.

    The password by its file (``ROLLSTREAM_SASL_PASSWORD_FILE``), never by value: a variable
    shows in ``/proc/<pid>/environ``, ``ps e`` and the logs of whatever prints its environment.
    """
    files.password(principal)  # made if missing
    return {
        "ROLLSTREAM_SECURITY_PROTOCOL": "SASL_SSL",
        "ROLLSTREAM_SASL_MECHANISM": MECHANISM,
        "ROLLSTREAM_SASL_USERNAME": principal,
        "ROLLSTREAM_SASL_PASSWORD_FILE": str(files.password_file(principal)),
        "ROLLSTREAM_SSL_CAFILE": str(files.ca_cert),
    }
