"""The pieces of the images that need no daemon: the mirror, the tar splice, the CA merge, slim."""

from __future__ import annotations

import io
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from rollstream.dev.containers import rootfs
from rollstream.dev.containers.images import CachedRoot, _tar_with, base_tag, root_tarball
from rollstream.dev.containers.settings import DockerSettings
from rollstream.settings import StatePaths

CERT_A = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----"
CERT_B = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----"
CERT_C = "-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----"

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.example.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.example.org/debian-security
Suites: bookworm-security
Components: main
"""
NODESOURCE = """\
Types: deb
URIs: https://deb.nodesource.com/node_20.x
Suites: nodistro
Components: main
"""


def _apt(tmp_path: Path, sources_list: str = "", **parts: str) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(sources_list)
    for name, text in parts.items():
        (tmp_path / "sources.list.d" / name.replace("_", ".")).write_text(text)
    return tmp_path


def test_the_mirror_is_the_debian_archive_apt_uses(tmp_path: Path) -> None:
    apt = _apt(tmp_path, **{"a_nodesource_sources": NODESOURCE, "debian_sources": DEB822})
    assert rootfs.apt_mirror(apt) == "http://deb.example.org/debian"


def test_the_mirror_from_one_line_sources_with_options(tmp_path: Path) -> None:
    apt = _apt(
        tmp_path,
        "# deb http://commented.example/debian bookworm main\n"
        "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ trixie main contrib\n",
    )
    assert rootfs.apt_mirror(apt) == "http://mirror.example/debian"


def test_no_debian_source_gives_no_mirror(tmp_path: Path) -> None:
    security_only = DEB822.split("\n\n")[1]
    apt = _apt(
        tmp_path,
        "deb http://archive.ubuntu.com/ubuntu jammy main\n",
        node_sources=NODESOURCE,
        debian_sources_disabled=DEB822,  # not .sources: apt does not read it either
        security_sources=security_only,
        off_sources=DEB822.replace("Types: deb\n", "Types: deb\nEnabled: no\n"),
    )
    assert rootfs.apt_mirror(apt) is None
    assert rootfs.apt_mirror(tmp_path / "absent") is None


def test_the_machine_certificates_are_added_once_each() -> None:
    extra = rootfs.ca_members(f"{CERT_A}\n{CERT_B}\n", f"{CERT_B}\n{CERT_C}\n")
    members = _members(extra + b"\0" * 1024)
    assert rootfs.certificates(members[rootfs.CA_BUNDLE].decode()) == [CERT_A, CERT_B, CERT_C]
    assert members[rootfs.HOST_CA_FILES.format(0)].decode().strip() == CERT_C
    assert len(members) == 2
    # No end marker: the members are appended to another archive's.
    assert len(extra) % 512 == 0 and extra[-512:] != b"\0" * 512


def _members(data: bytes) -> dict[str, bytes]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive:
            handle = archive.extractfile(member)
            out[member.name.removeprefix("./")] = handle.read() if handle else b""
    return out


def _tarball(path: Path, files: dict[str, bytes]) -> None:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in files.items():
            rootfs.add_file(archive, name, data, 0o644)


def test_the_import_stream_replaces_the_bundle_without_a_second_copy(tmp_path: Path) -> None:
    """Docker refuses a layer that holds a path twice: the root's bundle is cut out by bytes."""
    tarball = tmp_path / "root.tar"
    long_name = "usr/lib/" + "x" * 150  # a GNU long-name header before its member
    _tarball(
        tarball,
        {
            "./etc/passwd": b"root:x:0:0::/root:/bin/sh\n",
            f"./{rootfs.CA_BUNDLE}": f"{CERT_A}\n".encode() * 3,
            long_name: b"y" * 700,
            "./etc/hostname": b"h\n",
        },
    )
    index = rootfs.index_tarball(tarball)
    assert index.ca_bundle == f"{CERT_A}\n" * 3
    extra = rootfs.ca_members(index.ca_bundle, f"{CERT_C}\n")
    stream = b"".join(_tar_with(CachedRoot(tarball, index), extra))
    with tarfile.open(fileobj=io.BytesIO(stream), mode="r:") as archive:
        names = [m.name.removeprefix("./") for m in archive]
    assert sorted(names) == sorted(
        ["etc/passwd", long_name, "etc/hostname", rootfs.CA_BUNDLE, rootfs.HOST_CA_FILES.format(0)]
    )
    members = _members(stream)
    assert members[long_name] == b"y" * 700
    assert CERT_C in members[rootfs.CA_BUNDLE].decode()


def test_slim_removes_documentation_but_never_through_a_link_out_of_the_root(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "machine"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "README").write_text("the machine's own file")
    root = tmp_path / "root"
    doc = root / "usr/share/doc"
    (doc / "bash").mkdir(parents=True)
    (doc / "bash" / "copyright").write_text("c")
    (doc / "bash" / "README").write_text("r")
    (root / "usr/share/locale/de").mkdir(parents=True)
    (root / "var/lib/apt/lists").mkdir(parents=True)
    (root / "var/lib/apt/lists/deb_Packages").write_text("p")
    # An absolute link, meant for inside the root, resolves to the machine's files from here.
    (root / "usr/share/man").symlink_to(outside)
    (doc / "linked").symlink_to(outside / "pkg")
    rootfs.slim(root)
    assert (doc / "bash" / "copyright").exists() and not (doc / "bash" / "README").exists()
    assert not list((root / "usr/share/locale").iterdir())
    assert not list((root / "var/lib/apt/lists").iterdir())
    assert (outside / "pkg" / "README").read_text() == "the machine's own file"
    assert (
        "path-exclude /usr/share/doc/*"
        in (root / "etc/dpkg/dpkg.cfg.d/rollstream-slim").read_text()
    )


def test_a_static_busybox_is_told_from_a_dynamic_program() -> None:
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("no busybox on this machine (`apt-get install busybox-static`)")
    assert rootfs.is_static(Path(busybox).resolve())
    assert not rootfs.is_static(Path(sys.executable).resolve())


def test_the_names_follow_the_content() -> None:
    settings = DockerSettings(base_packages="python3, ca-certificates,python3")
    assert settings.packages() == ("ca-certificates", "python3")
    same = DockerSettings(base_packages="ca-certificates,python3")
    paths = StatePaths(cache_dir=Path("/cache"))
    assert base_tag(settings, "ca") == base_tag(same, "ca")
    assert base_tag(settings, "ca") != base_tag(settings, "another ca")
    assert base_tag(settings, "ca").startswith("rollstream-base:trixie-")
    more = DockerSettings(base_packages="ca-certificates,python3,git")
    assert base_tag(more, "ca") != base_tag(settings, "ca")
    # The cached root does not depend on the machine's certificates: they go in at import.
    assert root_tarball(settings, paths) == root_tarball(same, paths)
    assert root_tarball(more, paths) != root_tarball(settings, paths)
    assert root_tarball(settings, paths).parent == Path("/cache/images")
