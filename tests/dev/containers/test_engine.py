"""The private Docker daemon: it starts, runs containers on the host network, and stops clean."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from aiohttp import web

from rollstream.dev.containers import (
    DockerEngine,
    DockerSettings,
    ImageResult,
    busybox_image,
    procfs,
)
from rollstream.errors import ContainerEngineError, MissingToolError
from rollstream.host import HOST, free_port
from rollstream.settings import StatePaths
from tests.docker_fixtures import engine_of_its_own

pytestmark = pytest.mark.docker
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dockerd runs as root only")


def _leftovers(engine: DockerEngine) -> list[str]:
    """What of the daemon still runs or is mounted: its processes, then its mount points."""
    exec_root = str(engine.layout.exec_root)
    found = [f"dockerd {pid}" for pid in procfs.pids_running("dockerd", str(engine.dir))]
    found += [
        f"{program} {pid}"
        for program in ("containerd", "containerd-shim-runc-v2")
        for pid in procfs.pids_running(program, exec_root)
    ]
    mounts = procfs.mounts_under(engine.dir) + procfs.mounts_under(engine.layout.exec_root)
    return found + [str(p) for p in mounts]


def test_the_engine_starts_and_answers(docker_engine: DockerEngine) -> None:
    info = docker_engine.info
    assert info is not None and info.pid == docker_engine.running()
    assert info.docker_host == f"unix://{docker_engine.dir}/docker.sock"
    assert docker_engine.healthy()
    assert int(info.api_version.split(".")[1]) >= 41
    shown = docker_engine.docker("version", "--format", "{{.Server.Version}}").stdout
    assert shown.decode().strip() == info.version


async def test_a_host_network_container_reaches_a_server_of_the_test_process(
    docker_engine: DockerEngine, docker_busybox: ImageResult
) -> None:
    token = uuid.uuid4().hex

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text=token)

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, HOST, port).start()
    try:
        began = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            docker_engine.settings.docker,
            *("run", "--rm", "--network", "host", docker_busybox.tag),
            *("wget", "-qO-", f"http://{HOST}:{port}/"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=docker_engine.env(),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        print(f"busybox container ran in {time.monotonic() - began:.2f}s")
    finally:
        await runner.cleanup()
    assert proc.returncode == 0, err.decode()
    assert out.decode() == token


def test_the_base_image_runs_python_and_trusts_the_machines_cas(
    docker_engine: DockerEngine, docker_base: ImageResult
) -> None:
    print(f"base image: {docker_base}")
    assert docker_base.alias == "rollstream-base:trixie"
    began = time.monotonic()
    out = docker_engine.docker(
        "run", "--rm", "--network", "host", docker_base.tag, "python3", "-c", "print(1)"
    ).stdout
    print(f"base container ran python in {time.monotonic() - began:.2f}s")
    assert out.decode() == "1\n"
    script = 'cat "$SSL_CERT_FILE"; test -x /usr/bin/git && test -d /usr/lib/python3*/venv'
    bundle = docker_engine.docker("run", "--rm", docker_base.alias, "sh", "-c", script).stdout
    host = Path("/etc/ssl/certs/ca-certificates.crt")
    if host.exists():
        from rollstream.dev.containers.rootfs import certificates

        assert set(certificates(host.read_text())) <= set(certificates(bundle.decode()))


def test_the_base_image_is_not_built_again_when_the_engine_has_it(
    docker_engine: DockerEngine, docker_base: ImageResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rollstream.dev.containers import images, rootfs

    def no_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("debootstrap ran for an image the engine has")

    monkeypatch.setattr(rootfs, "debootstrap", no_bootstrap)
    again = images.base_image(docker_engine, paths=StatePaths())
    assert again.tag == docker_base.tag
    assert not again.bootstrapped and not again.imported


def test_a_cached_root_is_imported_without_bootstrapping(
    docker_engine: DockerEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new engine (a new data root) imports the cached tarball; no debootstrap runs."""
    from rollstream.dev.containers import images, rootfs

    def no_bootstrap(*args: object, **kwargs: object) -> None:
        raise AssertionError("debootstrap ran with a cached root")

    monkeypatch.setattr(rootfs, "debootstrap", no_bootstrap)
    settings = DockerSettings(base_packages=f"made-up-{uuid.uuid4().hex[:8]}", debootstrap="false")
    paths = StatePaths(cache_dir=tmp_path)
    found = shutil.which("busybox")
    if found is None:
        pytest.skip("no busybox (`apt-get install busybox-static`)")
    busybox = Path(found)
    tarball = images.root_tarball(settings, paths)
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(rootfs.busybox_tar(busybox.resolve()))  # no manifest: it is read
    result = images.base_image(docker_engine, settings, paths)
    assert result.imported and not result.bootstrapped and result.alias is None
    count = docker_engine.docker(
        "run", "--rm", result.tag, "sh", "-c", 'grep -c BEGIN "$SSL_CERT_FILE"'
    ).stdout
    host = Path("/etc/ssl/certs/ca-certificates.crt")
    if host.exists():
        assert int(count) == len(rootfs.certificates(host.read_text()))
    assert tarball.with_suffix(".json").exists()
    docker_engine.docker("rmi", result.tag)


def test_a_second_start_on_the_same_directory_adopts_the_live_daemon(
    docker_engine: DockerEngine,
) -> None:
    second = DockerEngine(DockerSettings(dir=docker_engine.dir), outlive_parent=False)
    with second:
        assert second.info is not None and second.info.reused
        assert second.info.pid == docker_engine.running()
        assert not second.launched
    assert docker_engine.healthy(), "leaving the second one's block stopped the daemon"


async def test_stopping_leaves_no_daemon_no_process_and_no_mount(
    own_engine: DockerEngine,
) -> None:
    async with own_engine:
        assert own_engine.launched and own_engine.healthy()
        image = busybox_image(own_engine)
        # PID 1 ignores SIGTERM: the daemon would wait 10 s for it; stop kills it at once.
        own_engine.docker("run", "-d", "--network", "host", image.tag, "sleep", "600")
        assert _leftovers(own_engine)
        began = time.monotonic()
    print(f"stopped with a running container in {time.monotonic() - began:.2f}s")
    assert own_engine.running() is None
    assert _leftovers(own_engine) == []
    assert not own_engine.stop(), "a second stop finds nothing to stop"


@needs_root
def test_what_a_killed_daemon_left_is_cleared_and_it_starts_again(
    own_engine: DockerEngine,
) -> None:
    first = own_engine.start()
    image = busybox_image(own_engine)
    own_engine.docker("run", "-d", "--network", "host", image.tag, "sleep", "600")
    os.kill(first.pid, signal.SIGKILL)
    assert procfs.wait_gone(first.pid, "dockerd", str(own_engine.layout.pidfile), 10)
    shims = procfs.pids_running("containerd-shim-runc-v2", str(own_engine.layout.exec_root))
    assert shims, "the container's shim outlives its daemon"
    second = own_engine.start()
    assert second.pid != first.pid and not second.reused
    assert all(procfs.cmdline(pid) is None for pid in shims)
    running = own_engine.docker("ps", "-q").stdout.decode().split()
    assert running == []


@needs_root
def test_a_pid_file_naming_another_program_does_not_stop_a_start(
    own_engine: DockerEngine,
) -> None:
    """After a restart the pid file's pid may be anyone's, even a program naming that file."""
    impostor = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", str(own_engine.layout.pidfile)]
    )
    try:
        own_engine.dir.mkdir(parents=True)
        own_engine.layout.pidfile.write_text(f"{impostor.pid}\n")
        info = own_engine.start()
        assert info.pid != impostor.pid and not info.reused
        assert impostor.poll() is None, "the other program was left alone"
    finally:
        impostor.kill()
        impostor.wait()


def test_a_missing_dockerd_says_what_to_install(tmp_path: Path) -> None:
    engine = engine_of_its_own(tmp_path / "engine", dockerd="no-such-dockerd")
    with pytest.raises(MissingToolError, match=r"apt-get install docker.io"):
        engine.start()


@needs_root
def test_a_daemon_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "dockerd"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'failed to start daemon: no overlay here' >&2\nexit 3\n")
    fake.chmod(0o755)
    engine = engine_of_its_own(tmp_path / "engine", dockerd=str(fake))
    with pytest.raises(ContainerEngineError, match=r"(?s)exited with code 3.*no overlay here"):
        engine.start()
