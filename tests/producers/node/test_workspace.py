"""Workspaces of each kind, the git baseline, and the bounded diff against it."""

from __future__ import annotations

import asyncio
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from rollstream.sandbox.runtime import LocalRuntime, Sandbox
from rollstream.sandbox.workspace import (
    DIFF_ARTIFACT,
    WorkspaceError,
    baseline,
    check_workspace,
    diff,
    materialize,
)
from rollstream.schemas.sessions import Artifact
from rollstream.schemas.tasks import Workspace, WorkspaceKind
from tests.network_probe import REPO_ROOT


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
        "PATH": "/usr/bin:/bin",
        "GIT_CONFIG_GLOBAL": "/dev/null",
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def _dest(tmp_path: Path) -> Path:
    dest = tmp_path / "work"
    dest.mkdir()
    return dest


async def _diff(dest: Path, base: str, max_bytes: int) -> Artifact:
    """The node's diff of ``dest`` (a sandbox's ``work``), run by a local runtime."""
    sandbox = Sandbox("s", dest.parent)
    sandbox.logs.mkdir(exist_ok=True)
    sandbox.home.mkdir(exist_ok=True)
    return await diff(LocalRuntime(), sandbox, base, max_bytes, 60)


async def test_empty_workspace_stays_empty(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    await materialize(Workspace(), dest)
    assert list(dest.iterdir()) == []


async def test_inline_files_are_written_with_their_folders(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    files = {"README.md": "hi\n", "src/pkg/mod.py": "x = 1\n"}
    await materialize(Workspace(kind=WorkspaceKind.INLINE, files=files), dest)
    assert (dest / "README.md").read_text() == "hi\n"
    assert (dest / "src/pkg/mod.py").read_text() == "x = 1\n"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("/etc/passwd", "must be relative"),
        ("../outside.txt", "'..' would leave the workspace"),
        ("a/../../b", "'..' would leave the workspace"),
        ("~/x", "must be relative"),
        (".git/config", ".git is the node's"),
    ],
)
async def test_inline_paths_outside_the_workspace_are_rejected(
    tmp_path: Path, path: str, reason: str
) -> None:
    workspace = Workspace(kind=WorkspaceKind.INLINE, files={path: "x"})
    with pytest.raises(WorkspaceError, match=reason):
        check_workspace(workspace)
    with pytest.raises(WorkspaceError, match=reason):
        await materialize(workspace, _dest(tmp_path))
    assert not (tmp_path / "outside.txt").exists()


async def test_a_local_directory_is_copied_with_dotfiles_and_modes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "bin").mkdir(parents=True)
    (source / ".env").write_text("A=1\n")
    (source / "bin/run.sh").write_text("#!/bin/sh\necho ok\n")
    (source / "bin/run.sh").chmod(0o755)
    dest = _dest(tmp_path)
    await materialize(Workspace(kind=WorkspaceKind.DIRECTORY, path=str(source)), dest)
    assert (dest / ".env").read_text() == "A=1\n"
    assert (dest / "bin/run.sh").stat().st_mode & 0o111
    (dest / ".env").write_text("changed")
    assert (source / ".env").read_text() == "A=1\n"  # a copy, not the original


async def test_a_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    workspace = Workspace(kind=WorkspaceKind.DIRECTORY, path=str(tmp_path / "nope"))
    with pytest.raises(WorkspaceError, match="does not exist"):
        await materialize(workspace, _dest(tmp_path))


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, str, str]:
    """A git repository with two commits: the first and the second's ids."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "--quiet", "--initial-branch=main")
    (repo / "app.py").write_text("version = 1\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "one")
    first = _git(repo, "rev-parse", "HEAD")
    (repo / "app.py").write_text("version = 2\n")
    (repo / "later.txt").write_text("later\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "--quiet", "-m", "two")
    return repo, first, _git(repo, "rev-parse", "HEAD")


async def test_a_git_repository_is_checked_out_at_the_commit(
    tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    path, first, _ = repo
    dest = _dest(tmp_path)
    await materialize(Workspace(kind=WorkspaceKind.GIT, path=str(path), commit=first), dest)
    assert (dest / "app.py").read_text() == "version = 1\n"
    assert not (dest / "later.txt").exists()
    assert _git(dest, "rev-parse", "HEAD") == first


async def test_a_missing_commit_is_a_clear_error(
    tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    path, _, _ = repo
    workspace = Workspace(kind=WorkspaceKind.GIT, path=str(path), commit="0" * 40)
    with pytest.raises(WorkspaceError, match=f"checking out {'0' * 40}"):
        await materialize(workspace, _dest(tmp_path))


async def test_a_missing_repository_is_a_clear_error(tmp_path: Path) -> None:
    workspace = Workspace(kind=WorkspaceKind.GIT, path=str(tmp_path / "nope"), commit="abc")
    with pytest.raises(WorkspaceError, match="git clone"):
        await materialize(workspace, _dest(tmp_path))


async def test_diff_against_the_baseline_has_new_changed_and_deleted_files(
    tmp_path: Path,
) -> None:
    dest = _dest(tmp_path)
    files = {"keep.txt": "same\n", "edit.txt": "old\n", "gone.txt": "bye\n"}
    await materialize(Workspace(kind=WorkspaceKind.INLINE, files=files), dest)
    base = await baseline(dest)
    (dest / "edit.txt").write_text("new\n")
    (dest / "gone.txt").unlink()
    (dest / "sub").mkdir()
    (dest / "sub/new.txt").write_text("created\n")
    (dest / "blob.bin").write_bytes(bytes(range(256)))
    artifact = await _diff(dest, base, 100_000)
    text = artifact.content.decode()
    assert artifact.name == DIFF_ARTIFACT and not artifact.truncated
    assert "+new" in text and "-old" in text
    assert "deleted file mode" in text and "gone.txt" in text
    assert "b/sub/new.txt" in text and "+created" in text  # untracked files count
    assert "GIT binary patch" in text  # --binary: the diff applies to binary files too
    assert "keep.txt" not in text
    assert artifact.original_size == len(artifact.content)


async def test_diff_includes_what_the_harness_committed_itself(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    base = await baseline(dest)
    (dest / "committed.txt").write_text("c\n")
    _git(dest, "add", "-A")
    _git(dest, "commit", "--quiet", "-m", "harness commit")
    artifact = await _diff(dest, base, 100_000)
    assert b"+c" in artifact.content


async def test_baseline_is_the_same_commit_for_the_same_files(tmp_path: Path) -> None:
    ids = []
    for name in ("a", "b"):
        dest = tmp_path / name
        dest.mkdir()
        await materialize(Workspace(kind=WorkspaceKind.INLINE, files={"f": "x"}), dest)
        ids.append(await baseline(dest))
    assert ids[0] == ids[1]  # fixed author and date


async def test_baseline_on_a_clone_commits_on_top_of_the_checkout(
    tmp_path: Path, repo: tuple[Path, str, str]
) -> None:
    path, first, _ = repo
    dest = _dest(tmp_path)
    await materialize(Workspace(kind=WorkspaceKind.GIT, path=str(path), commit=first), dest)
    (dest / "setup-output.txt").write_text("from setup\n")
    base = await baseline(dest)
    assert _git(dest, "rev-parse", "HEAD~1") == first
    artifact = await _diff(dest, base, 100_000)
    assert artifact.content == b""  # the setup's output is in the baseline, not the diff


async def test_a_large_diff_is_truncated_at_a_line_end(tmp_path: Path) -> None:
    dest = _dest(tmp_path)
    base = await baseline(dest)
    (dest / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    artifact = await _diff(dest, base, 1000)
    assert artifact.truncated
    assert len(artifact.content) <= 1000 and artifact.content.endswith(b"\n")
    assert artifact.original_size == (tmp_path / "logs" / DIFF_ARTIFACT).stat().st_size > 30_000


@pytest.mark.parametrize("walls", [True, False])
async def test_a_filter_the_policy_wrote_into_git_config_runs_behind_the_wall(
    tmp_path: Path, walls: bool
) -> None:
    # A stand-in for the broker, the admin port, the node API: a listener on the host.
    server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    dest = _dest(tmp_path)
    (dest / "f.txt").write_text("x\n")
    base = await baseline(dest)
    # What a harness can do in its own workspace: a clean filter for every file, whose command
    # git runs when it stages them.
    probe = tmp_path / "probe.json"
    argv = shlex.join([sys.executable, "-m", "tests.network_probe", f"broker=127.0.0.1:{port}"])
    command = f"(cd {shlex.quote(str(REPO_ROOT))} && {argv} > {shlex.quote(str(probe))}); cat"
    with (dest / ".git" / "config").open("a") as config:
        config.write(f'[filter "x"]\n\tclean = "{command}"\n')
    (dest / ".gitattributes").write_text("* filter=x\n")
    (dest / "f.txt").write_text("y\n")
    sandbox = Sandbox("s", tmp_path)
    sandbox.logs.mkdir()
    sandbox.home.mkdir()
    async with server:
        artifact = await diff(LocalRuntime(walls=walls), sandbox, base, 100_000, 60)
    assert b"+y" in artifact.content  # the filter passed the content through
    reached = json.loads(probe.read_text())
    # Behind the wall the filter's command reaches nothing; without it (the control), the host.
    assert reached == {"broker": "ConnectionRefusedError" if walls else "open"}
