"""The local images every container test builds on: a Debian base and a busybox, named by content.

``base_image`` bootstraps Debian once into a tarball under the cache (about a minute) and
imports it into the engine (seconds); an engine that has the image already skips both, and a
new engine (a new data root) imports the cached tarball without bootstrapping again. The tag
names the content: a hash of the suite, the package list, the architecture, the machine's CA
certificates and this recipe's version, so a change to any of them makes a new image.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rollstream.dev.containers import rootfs
from rollstream.dev.containers.engine import DockerEngine
from rollstream.dev.containers.settings import DEFAULT_BASE_PACKAGES, DockerSettings
from rollstream.errors import ContainerEngineError
from rollstream.host import exclusive, require_tool
from rollstream.settings import StatePaths

log = logging.getLogger(__name__)

#: Bump when the recipe changes what an image holds: every cached root and tag changes with it.
RECIPE_VERSION = "1"
BASE_REPOSITORY = "rollstream-base"
BUSYBOX_REPOSITORY = "rollstream-busybox"
_CA = "/etc/ssl/certs/ca-certificates.crt"
#: The base image's configuration: package clients trust the bundle with the machine's CAs.
BASE_CHANGES = (
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    f"ENV SSL_CERT_FILE={_CA}",
    f"ENV PIP_CERT={_CA}",
    f"ENV REQUESTS_CA_BUNDLE={_CA}",
    f"ENV NODE_EXTRA_CA_CERTS={_CA}",
    'CMD ["/bin/bash"]',
)
BUSYBOX_CHANGES = ("ENV PATH=/bin", 'CMD ["/bin/sh"]')


@dataclass(frozen=True)
class ImageResult:
    """An image ensured in an engine, and what it took."""

    #: The content-named tag (``rollstream-base:trixie-<hash>``).
    tag: str
    #: A friendly tag set to the same image (``rollstream-base:trixie``), if any.
    alias: str | None
    #: Whether the root filesystem was made now (debootstrap ran), not taken from the cache.
    bootstrapped: bool
    #: Whether the image was imported now; False when the engine had it already.
    imported: bool
    seconds: float
    size: int


@dataclass(frozen=True)
class CachedRoot:
    """A bootstrapped root's tarball in the cache, and what importing it needs to know."""

    tarball: Path
    index: rootfs.TarballIndex


@functools.cache
def machine_arch() -> str:
    """Debian's name of this machine's architecture (``amd64``, ``arm64``)."""
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        return subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
        ).stdout.strip()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())


def _digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:12]


def _host_ca() -> str:
    try:
        return rootfs.HOST_CA_BUNDLE.read_text()
    except OSError:
        return ""  # a machine without Debian's bundle: the image keeps its own


def base_tag(settings: DockerSettings, host_ca: str | None = None) -> str:
    """The content-named tag of the base image these settings describe, on this machine."""
    host_ca = _host_ca() if host_ca is None else host_ca
    key = _digest(RECIPE_VERSION, settings.suite, settings.packages(), machine_arch(), host_ca)
    return f"{BASE_REPOSITORY}:{settings.suite}-{key}"


def root_tarball(settings: DockerSettings, paths: StatePaths) -> Path:
    """Where the bootstrapped root of these settings is cached (whatever the machine's CAs)."""
    key = _digest(RECIPE_VERSION, settings.suite, settings.packages(), machine_arch())
    return paths.cache_dir / "images" / f"debian-{settings.suite}-{machine_arch()}-{key}.tar"


def base_image(
    engine: DockerEngine,
    settings: DockerSettings | None = None,
    paths: StatePaths | None = None,
    *,
    rebuild: bool = False,
) -> ImageResult:
    """Ensure the Debian base image in ``engine``: from the engine, the cache, or debootstrap.

    ``rebuild`` bootstraps and imports again even when both are cached (a newer point release
    of the suite). The default package list also gets the tag ``rollstream-base:SUITE``.
    """
    settings = settings or engine.settings
    paths = paths or StatePaths()
    began = time.monotonic()
    host_ca = _host_ca()
    tag = base_tag(settings, host_ca)
    default = settings.packages() == DockerSettings(base_packages=DEFAULT_BASE_PACKAGES).packages()
    alias = f"{BASE_REPOSITORY}:{settings.suite}" if default else None
    if not rebuild and engine.api.image(tag) is not None:
        return _done(engine, tag, alias, began, bootstrapped=False, imported=False)
    root, bootstrapped = cached_root(settings, paths, rebuild=rebuild)
    log.info("importing %s into %s", tag, engine.docker_host)
    extra = rootfs.ca_members(root.index.ca_bundle, host_ca)
    labels = (
        f"LABEL rollstream.image=base rollstream.suite={settings.suite} "
        f"rollstream.packages={','.join(settings.packages())} rollstream.recipe={RECIPE_VERSION}"
    )
    import_image(engine, _tar_with(root, extra), tag, (*BASE_CHANGES, labels))
    return _done(engine, tag, alias, began, bootstrapped=bootstrapped, imported=True)


def cached_root(
    settings: DockerSettings, paths: StatePaths, *, rebuild: bool = False
) -> tuple[CachedRoot, bool]:
    """The cached root of these settings, bootstrapped first if need be; whether it was."""
    tarball = root_tarball(settings, paths)
    manifest = tarball.with_suffix(".json")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(tarball.with_suffix(".lock")):  # one build at a time, the others wait for it
        if rebuild or not tarball.exists():
            _bootstrap(settings, paths, tarball)
            built = True
        else:
            built = False
        try:
            saved = json.loads(manifest.read_text())
            start, stop = saved["ca_range"]
            index = rootfs.TarballIndex(int(saved["end"]), (start, stop), str(saved["ca_bundle"]))
        except (OSError, ValueError, KeyError, TypeError):
            index = rootfs.index_tarball(tarball)  # the manifest was lost: read the tarball
            _write_manifest(settings, CachedRoot(tarball, index))
    return CachedRoot(tarball, index), built


def _bootstrap(settings: DockerSettings, paths: StatePaths, tarball: Path) -> None:
    debootstrap = require_tool(
        settings.debootstrap, "debootstrap (`apt-get install debootstrap`, as root)"
    )
    if os.geteuid() != 0:
        raise ContainerEngineError("debootstrap must run as root to build the base image")
    mirror = settings.mirror or rootfs.apt_mirror() or rootfs.DEFAULT_MIRROR
    images = tarball.parent
    # Named after the tarball, under its lock: what a killed build left is removed here.
    work = images / f"{tarball.stem}.work"
    rootfs.remove_root(work)
    work.mkdir()
    try:
        root = work / "root"
        rootfs.debootstrap(
            debootstrap,
            settings.suite,
            settings.packages(),
            root,
            mirror,
            tarball.with_suffix(".log"),
            images / "debs" / f"{settings.suite}-{machine_arch()}",
        )
        rootfs.slim(root)
        partial = work / "root.tar"
        rootfs.tar_root(root, partial)
        index = rootfs.index_tarball(partial)
        partial.replace(tarball)  # whole or not at all: a failed build leaves no tarball
        _write_manifest(settings, CachedRoot(tarball, index), mirror=mirror)
        log.info("cached the %s root in %s (%.0f MB)", settings.suite, tarball, index.end / 1e6)
    finally:
        rootfs.remove_root(work)


def _write_manifest(settings: DockerSettings, root: CachedRoot, mirror: str | None = None) -> None:
    record = {
        "suite": settings.suite,
        "packages": list(settings.packages()),
        "arch": machine_arch(),
        "recipe": RECIPE_VERSION,
        "mirror": mirror,
        "end": root.index.end,
        "ca_range": list(root.index.ca_range),
        "ca_bundle": root.index.ca_bundle,
        "created_at": time.time(),
    }
    partial = root.tarball.with_suffix(".json.partial")
    partial.write_text(json.dumps(record))
    partial.replace(root.tarball.with_suffix(".json"))


def _tar_with(root: CachedRoot, extra: bytes) -> Iterator[bytes]:
    """The cached root's members but its CA bundle, then ``extra`` members, then the end.

    Byte ranges of the tarball, not a re-encoding of it: the import reads at disk speed.
    """
    start, stop = root.index.ca_range
    with root.tarball.open("rb") as fh:
        for begin, end in ((0, start), (stop, root.index.end)):
            fh.seek(begin)
            remaining = end - begin
            while remaining > 0:
                chunk = fh.read(min(1 << 20, remaining))
                if not chunk:
                    raise ContainerEngineError(f"{root.tarball} is shorter than its manifest says")
                remaining -= len(chunk)
                yield chunk
    yield extra
    yield b"\0" * 1024  # the end-of-archive marker: two zero blocks


def busybox_image(engine: DockerEngine, settings: DockerSettings | None = None) -> ImageResult:
    """Ensure a tiny image holding only a static busybox (about 2 MB; imported in a second).

    Enough for runtime tests that need a shell and wget. Debian's ``busybox-static`` package
    provides the binary; a dynamically linked busybox would not run alone in the image.
    """
    settings = settings or engine.settings
    began = time.monotonic()
    hint = "a static busybox (`apt-get install busybox-static`, as root)"
    binary = Path(require_tool(settings.busybox, hint)).resolve()
    if not rootfs.is_static(binary):
        raise ContainerEngineError(f"{binary} is linked dynamically: install {hint}")
    data = binary.read_bytes()
    tag = f"{BUSYBOX_REPOSITORY}:{_digest(RECIPE_VERSION, hashlib.sha256(data).hexdigest())}"
    alias = f"{BUSYBOX_REPOSITORY}:latest"
    if engine.api.image(tag) is not None:
        return _done(engine, tag, alias, began, bootstrapped=False, imported=False)
    import_image(engine, [rootfs.busybox_tar(binary)], tag, BUSYBOX_CHANGES)
    return _done(engine, tag, alias, began, bootstrapped=False, imported=True)


def import_image(
    engine: DockerEngine, chunks: Iterable[bytes], tag: str, changes: Iterable[str]
) -> None:
    """``docker import`` a root filesystem's tar stream as ``tag``, with Dockerfile changes."""
    client = require_tool(engine.settings.docker, "the docker client (`apt-get install docker.io`)")
    cmd = [client, "import"]
    for change in changes:
        cmd += ["--change", change]
    cmd += ["-", tag]
    # Output to a file, not a pipe: nothing reads it while the stream is being written.
    with tempfile.TemporaryFile() as output:
        proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=output, stderr=output, env=engine.env()
        )
        assert proc.stdin is not None
        try:
            with proc.stdin:
                for chunk in chunks:
                    proc.stdin.write(chunk)
        except BrokenPipeError:
            pass  # the client gave up: its exit code and output say why
        try:
            code = proc.wait(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = -1
        if code != 0:
            output.seek(0)
            said = output.read().decode(errors="replace").strip()[-2000:]
            raise ContainerEngineError(f"docker import of {tag} failed (exit {code}): {said}")


def _done(
    engine: DockerEngine,
    tag: str,
    alias: str | None,
    began: float,
    *,
    bootstrapped: bool,
    imported: bool,
) -> ImageResult:
    inspected = engine.api.image(tag) or {}
    if alias is not None and alias not in (inspected.get("RepoTags") or []):
        engine.api.tag(tag, alias)
    seconds = round(time.monotonic() - began, 3)
    if imported:
        log.info("image %s ready in %.1fs", tag, seconds)
    return ImageResult(tag, alias, bootstrapped, imported, seconds, int(inspected.get("Size", 0)))


def local_images(engine: DockerEngine) -> list[tuple[str, int]]:
    """The ``rollstream-*`` tags of the engine with their sizes, sorted by tag."""
    tags = []
    for image in engine.api.images():
        for tag in image.get("RepoTags") or []:
            if tag.startswith("rollstream-"):
                tags.append((tag, int(image.get("Size", 0))))
    return sorted(tags)
