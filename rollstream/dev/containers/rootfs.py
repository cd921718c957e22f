"""Root filesystems for images, made without a registry: Debian's debootstrap, a static busybox.

No image registry is reachable on the machines this runs on, but Debian's package mirror is:
debootstrap builds a Debian root from it, from the mirror apt already uses. The machine's CA
certificates go in too: package clients in the image need the ones its TLS chain needs here.
"""

from __future__ import annotations

import io
import logging
import re
import shutil
import struct
import subprocess
import tarfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rollstream.dev.containers import procfs
from rollstream.errors import ContainerEngineError

log = logging.getLogger(__name__)

DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: Debian's suite and code names: an apt source for one of them is a Debian archive mirror.
DEBIAN_SUITES = frozenset(
    {"buster", "bullseye", "bookworm", "trixie", "forky", "duke", "sid"}
    | {"oldoldstable", "oldstable", "stable", "testing", "unstable"}
)
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
#: Where the machine's own certificates go in the image, one file each: ``update-ca-certificates``
#: run by a later package install keeps them in the bundle.
HOST_CA_FILES = "usr/local/share/ca-certificates/rollstream-host-{:03d}.crt"
_CERT = re.compile(r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----", re.S)

#: What a slim Debian image leaves out, now and in what later package installs bring.
_DPKG_EXCLUDES = """\
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
"""


# -- the mirror ---------------------------------------------------------------------------


def _one_line_sources(text: str) -> Iterable[tuple[str, list[str], list[str]]]:
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] != ["deb"]:
            continue
        words = words[1:]
        if words and words[0].startswith("["):  # options: [arch=amd64 signed-by=...]
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 3:
            yield words[0], [words[1]], words[2:]


def _deb822_sources(text: str) -> Iterable[tuple[str, list[str], list[str]]]:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, _, value = line.partition(":")
            fields[key.strip().lower()] = value.strip()
        if "deb" not in fields.get("types", "").split():
            continue
        if fields.get("enabled", "yes").lower() == "no":
            continue
        for uri in fields.get("uris", "").split():
            yield uri, fields.get("suites", "").split(), fields.get("components", "").split()


def apt_mirror(apt_dir: Path = Path("/etc/apt")) -> str | None:
    """The Debian archive mirror apt uses on this machine, if it uses one.

    A source counts when it is http(s), carries a Debian suite (not its -security or -updates
    part) and the main component; the first such one, in apt's own reading order, wins.
    """
    files = [apt_dir / "sources.list"]
    parts = apt_dir / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir() if p.suffix in (".list", ".sources"))
    for path in files:
        try:
            text = path.read_text()
        except OSError:
            continue
        entries = _deb822_sources(text) if path.suffix == ".sources" else _one_line_sources(text)
        for uri, suites, components in entries:
            if (
                uri.startswith(("http://", "https://"))
                and "main" in components
                and any(suite in DEBIAN_SUITES for suite in suites)
            ):
                return uri.rstrip("/")
    return None


# -- debootstrap ----------------------------------------------------------------------------


def debootstrap(
    executable: str,
    suite: str,
    packages: Iterable[str],
    target: Path,
    mirror: str,
    log_path: Path,
    cache_dir: Path,
) -> None:
    """``debootstrap --variant=minbase`` of ``suite`` into ``target``, progress in the log.

    Its full output goes to ``log_path``; a line per phase (and every 25 packages) goes to this
    module's logger, since the whole takes about a minute. ``cache_dir`` keeps the downloaded
    packages for the next bootstrap (another package list reuses most of them).
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        executable,
        "--variant=minbase",
        f"--include={','.join(packages)}",
        "--components=main",
        f"--cache-dir={cache_dir.resolve()}",
        suite,
        str(target),
        mirror,
    ]
    log.info("debootstrap %s from %s into %s (log: %s)", suite, mirror, target, log_path)
    began = time.monotonic()
    phase, count = "", 0
    with (
        log_path.open("w") as out,
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        ) as proc,
    ):
        assert proc.stdout is not None
        for line in proc.stdout:
            out.write(line)
            verb = line[3:].split(" ", 1)[0] if line.startswith("I: ") else ""
            if verb in ("", "Validating"):  # each package's check follows its download
                continue
            if verb != phase:
                phase, count = verb, 0
                log.info("debootstrap: %s (%.0fs)", line[3:].strip(), time.monotonic() - began)
            count += 1
            if count % 25 == 0:
                log.info(
                    "debootstrap: %s %d so far (%.0fs)", phase, count, time.monotonic() - began
                )
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").strip().splitlines()[-25:])
        raise ContainerEngineError(
            f"debootstrap of {suite} from {mirror} failed (exit {proc.returncode}); "
            f"its log is {log_path}:\n{tail}"
        )
    log.info("debootstrap of %s done in %.0fs", suite, time.monotonic() - began)


def slim(root: Path) -> None:
    """Leave out of a bootstrapped root what an image does not need, as Debian's slim ones do.

    Package lists and downloaded packages, documentation, manuals and translations: about a
    quarter of the size, and so of every import. Later package installs leave them out too.
    """
    for rel, keep in (
        ("var/lib/apt/lists", ()),
        ("var/cache/apt/archives", ("partial", "lock")),
        ("usr/share/man", ()),
        ("usr/share/info", ()),
        ("usr/share/locale", ()),
        ("usr/share/lintian", ()),
    ):
        for child in _children(root, rel):
            if child.name not in keep:
                _remove(child)
    for doc in _children(root, "usr/share/doc"):
        if doc.is_dir() and not doc.is_symlink():
            for child in _children(root, f"usr/share/doc/{doc.name}"):
                if child.name != "copyright":
                    _remove(child)
    for rel in ("var/cache/apt/pkgcache.bin", "var/cache/apt/srcpkgcache.bin"):
        _remove(root / rel)
    for rel in ("var/log/bootstrap.log", "var/log/dpkg.log", "var/log/alternatives.log"):
        _remove(root / rel)
    config = root / "etc/dpkg/dpkg.cfg.d"
    config.mkdir(parents=True, exist_ok=True)
    (config / "rollstream-slim").write_text(_DPKG_EXCLUDES)


def _children(root: Path, rel: str) -> list[Path]:
    """The entries of ``root/rel``; none if the path leads through a symbolic link.

    The root's links are meant for inside it: an absolute one, followed from outside, is a
    path of this machine, whose files are not to be removed.
    """
    folder = root / rel
    if folder.resolve() != root.resolve() / rel or not folder.is_dir():
        return []
    return list(folder.iterdir())


def _remove(path: Path) -> None:
    """Remove a file, a link (not what it points to) or a directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def remove_root(root: Path) -> None:
    """Remove a bootstrapped root, unmounting first what a failed debootstrap left mounted.

    debootstrap mounts /proc and /sys in the root, and bind-mounts the machine's /dev in it
    when it runs in a container: deleting through such a mount would delete the machine's own.
    """
    if not root.exists():
        return
    stuck = procfs.unmount_under(root)
    if stuck:
        raise ContainerEngineError(
            f"{root} still has mounts ({', '.join(map(str, stuck))}); not removing it: "
            "unmount them and remove it by hand"
        )
    shutil.rmtree(root)


def tar_root(root: Path, out: Path) -> None:
    """Pack ``root`` into the tarball ``out``: numeric owners, not across mount points."""
    cmd = ["tar", "--numeric-owner", "--one-file-system", "-C", str(root), "-cf", str(out), "."]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ContainerEngineError(f"packing {root} failed: {proc.stderr.strip()[-2000:]}")


def archive_end(data: bytes) -> int:
    """The offset of a tar's end-of-archive marker: where more members may be appended."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for _ in archive:
            pass
        return archive.offset


# -- certificates ---------------------------------------------------------------------------


def certificates(text: str) -> list[str]:
    """The PEM certificates in a bundle's text, in order."""
    return _CERT.findall(text)


def ca_members(image_bundle: str, host_bundle: str) -> bytes:
    """A tar (no end marker) of the image's CA bundle with the machine's certificates added.

    The bundle keeps the image's own certificates and adds each one of the machine's it lacks
    (a proxy's, a mirror's, roots Debian has since dropped), both as files for
    ``update-ca-certificates`` and in the bundle itself, which clients read.
    """
    own = certificates(image_bundle)
    extra = [c for c in certificates(host_bundle) if c not in set(own)]
    files: dict[str, bytes] = {
        HOST_CA_FILES.format(i): (cert + "\n").encode() for i, cert in enumerate(extra)
    }
    files[CA_BUNDLE] = ("\n".join([*own, *extra]) + "\n").encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in files.items():
            add_file(archive, name, data, 0o644)
    # Without the two zero blocks that close an archive: these members follow others.
    return buffer.getvalue()[: archive_end(buffer.getvalue())]


@dataclass(frozen=True)
class TarballIndex:
    """Where things are in a root's tarball, found by reading it once."""

    #: The offset of the end-of-archive marker: more members may follow from there.
    end: int
    #: The byte range of the CA bundle's member (headers and data), empty if there is none.
    ca_range: tuple[int, int]
    #: The text of the root's own CA bundle.
    ca_bundle: str


def index_tarball(tarball: Path) -> TarballIndex:
    """Read a root's tarball once: its end, and the place and text of its CA bundle.

    Docker refuses a layer that holds a path twice, so replacing the bundle means leaving its
    member out of the stream: its byte range lets the stream skip it without unpacking anything.
    """
    ca_range, bundle = (0, 0), ""
    with tarfile.open(tarball, "r:") as archive:
        for member in archive:
            if member.name.removeprefix("./") == CA_BUNDLE and member.isfile():
                handle = archive.extractfile(member)
                bundle = handle.read().decode(errors="replace") if handle else ""
                # The header (and any long-name header before it) through the padded data.
                ca_range = (member.offset, member.offset_data + -(-member.size // 512) * 512)
        return TarballIndex(archive.offset, ca_range, bundle)


# -- busybox ----------------------------------------------------------------------------------


def is_static(path: Path) -> bool:
    """Whether the ELF executable at ``path`` needs no dynamic loader (no PT_INTERP header)."""
    with path.open("rb") as fh:
        header = fh.read(64)
        if header[:4] != b"\x7fELF" or header[4] != 2:  # 64-bit ELF only
            return False
        order = "<" if header[5] == 1 else ">"
        phoff = struct.unpack_from(f"{order}Q", header, 32)[0]
        phentsize, phnum = struct.unpack_from(f"{order}HH", header, 54)
        fh.seek(phoff)
        table = fh.read(phentsize * phnum)
    kinds = (struct.unpack_from(f"{order}I", table, i * phentsize)[0] for i in range(phnum))
    return 3 not in kinds  # PT_INTERP


def busybox_tar(busybox: Path) -> bytes:
    """A complete tar of a root holding only a static busybox and a link per applet."""
    applets = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=True
    ).stdout.split()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name in ("bin", "etc", "root", "proc", "sys", "dev"):
            add_dir(archive, name)
        add_dir(archive, "tmp", 0o1777)
        add_file(archive, "bin/busybox", busybox.read_bytes(), 0o755)
        for applet in applets:
            if applet != "busybox":
                link = tarfile.TarInfo(f"bin/{applet}")
                link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
                archive.addfile(link)
        add_file(archive, "etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644)
        add_file(archive, "etc/group", b"root:x:0:\n", 0o644)
    return buffer.getvalue()


def add_dir(archive: tarfile.TarFile, name: str, mode: int = 0o755) -> None:
    """Add a directory owned by root."""
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    archive.addfile(info)


def add_file(archive: tarfile.TarFile, name: str, data: bytes, mode: int) -> None:
    """Add a regular file owned by root."""
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    archive.addfile(info, io.BytesIO(data))
