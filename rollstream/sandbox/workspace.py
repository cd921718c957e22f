"""A session's workspace: the task's files in a directory, a git baseline, the diff after the run.

The baseline is a git commit of everything in the workspace once init is done (so the setup's
own output, e.g. installed dependencies, is not the harness's work). After the run, ``git add
-A`` stages everything, untracked files included, and ``git diff --cached`` against the
baseline commit is the harness's work, even if it committed or switched branches itself.

That diff runs in the session's runtime behind a wall, never on the host's network: the
repository's ``.git/config`` is the policy's by then, and its filter drivers, ``core.fsmonitor``
or ``include.path`` name commands git would run.

Every git and copy step is a subprocess, so an init timeout or a cancellation kills it.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from pathlib import Path, PurePosixPath

from rollstream.errors import RollstreamError
from rollstream.sandbox.harnesses.launch import HarnessLaunch
from rollstream.sandbox.netns import Wall
from rollstream.sandbox.outputs import read_head
from rollstream.sandbox.runtime import SHELL, Runtime, Sandbox
from rollstream.schemas.sessions import Artifact
from rollstream.schemas.tasks import Workspace, WorkspaceKind
from rollstream.subprocesses import spawn

#: A fixed identity and date: the same files give the same baseline commit on every node.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "rollstream",
    "GIT_AUTHOR_EMAIL": "rollstream@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "rollstream",
    "GIT_COMMITTER_EMAIL": "rollstream@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
#: Config that must not depend on the repository a workspace was copied from: no signing
#: prompts, no hooks, no external diff drivers, no colours.
_GIT_CONFIG = (
    "-c",
    "commit.gpgsign=false",
    "-c",
    f"core.hooksPath={os.devnull}",
    "-c",
    "core.autocrlf=false",
    "-c",
    "color.ui=false",
)
DIFF_ARTIFACT = "workspace.diff"
_ERROR_TAIL = 2000


class WorkspaceError(RollstreamError):
    """A workspace that cannot be materialized as given (bad path, missing commit)."""


#: Git run by rollstream ignores the machine's and the user's config (signing, aliases, hooks,
#: whitespace rules) and never prompts: they must not change a session's workspace or a patch.
GIT_ISOLATION = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}


def _git_env() -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "LANG", "LC_ALL") if k in os.environ}
    return env | GIT_ISOLATION | _IDENTITY


async def _run(*argv: str, what: str) -> bytes:
    """Run ``argv``; its stdout, or a WorkspaceError saying ``what`` failed and why."""
    proc = await spawn(
        *argv,
        env=_git_env(),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await proc.communicate()
    except BaseException:
        # Timeout or cancellation: a git clone must not keep running behind the session.
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        raise
    if proc.returncode != 0:
        detail = err.decode(errors="replace").strip()[-_ERROR_TAIL:]
        raise WorkspaceError(f"{what} failed (exit {proc.returncode}): {detail}")
    return out


async def _git(repo: Path, *args: str, what: str) -> bytes:
    return await _run("git", *_GIT_CONFIG, "-C", str(repo), *args, what=what)


def inline_path(relative: str) -> PurePosixPath:
    """``relative`` as a safe path inside the workspace, or a WorkspaceError saying why not."""
    path = PurePosixPath(relative)
    if not relative or path.is_absolute() or relative.startswith("~"):
        raise WorkspaceError(f"inline file {relative!r}: the path must be relative")
    if ".." in path.parts:
        raise WorkspaceError(f"inline file {relative!r}: '..' would leave the workspace")
    if path.parts[0] == ".git":
        raise WorkspaceError(f"inline file {relative!r}: .git is the node's, not the task's")
    return path


def check_workspace(workspace: Workspace) -> None:
    """Reject a workspace that can never be materialized, before any session starts."""
    for relative in workspace.files:
        inline_path(relative)


def _write_inline(files: dict[str, str], dest: Path) -> None:
    for relative, text in files.items():
        target = dest / inline_path(relative)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def _source_directory(path: str) -> Path:
    source = Path(path).expanduser()
    if not source.is_dir():
        raise WorkspaceError(f"workspace directory {source} does not exist")
    return source


async def materialize(workspace: Workspace, dest: Path) -> None:
    """Put ``workspace``'s files into the existing, empty directory ``dest``."""
    check_workspace(workspace)
    if workspace.kind is WorkspaceKind.INLINE:
        _write_inline(workspace.files, dest)
    elif workspace.kind is WorkspaceKind.DIRECTORY:
        assert workspace.path is not None  # the model's validator requires it
        source = _source_directory(workspace.path)
        # cp -a keeps modes, symlinks and dotfiles, and is a process a timeout can kill.
        await _run("cp", "-a", f"{source}/.", str(dest), what=f"copying {source}")
    elif workspace.kind is WorkspaceKind.GIT:
        assert workspace.path is not None and workspace.commit is not None
        repo = workspace.path
        await _run(
            "git", *_GIT_CONFIG, "clone", "--quiet", "--no-checkout", repo, str(dest),
            what=f"git clone {repo}",
        )  # fmt: skip
        await _git(
            dest,
            "checkout",
            "--quiet",
            "--detach",
            workspace.commit,
            what=f"checking out {workspace.commit} of {repo}",
        )


async def baseline(dest: Path) -> str:
    """Commit everything in ``dest`` (a git repository or not yet) and return the commit id."""
    dot_git = dest / ".git"
    if dot_git.is_file():
        # A worktree's or submodule's link to a repository outside the workspace: committing
        # through it would write there. The workspace gets a repository of its own instead.
        dot_git.unlink()
    if not dot_git.exists():
        await _git(dest, "init", "--quiet", "--initial-branch=rollstream", what="git init")
    await _git(dest, "add", "-A", what="git add (baseline)")
    await _git(
        dest,
        "commit",
        "--quiet",
        "--allow-empty",
        "--no-verify",
        "-m",
        "rollstream baseline",
        what="git commit (baseline)",
    )
    return (await _git(dest, "rev-parse", "HEAD", what="git rev-parse")).decode().strip()


async def diff(
    runtime: Runtime, sandbox: Sandbox, base: str, max_bytes: int, timeout_s: float
) -> Artifact:
    """The diff of the sandbox's workspace against commit ``base``, untracked files included.

    Git runs in ``runtime`` behind a wall that reaches nothing (see the module's docstring),
    killed after ``timeout_s``. The whole diff is written to ``logs/workspace.diff`` (kept with
    the session's logs); the artifact holds its first ``max_bytes``, cut at a line end where
    possible.
    """
    out = sandbox.logs / DIFF_ARTIFACT
    out.unlink(missing_ok=True)
    git = shlex.join(["git", *_GIT_CONFIG])
    script = (
        f"{git} add -A && {git} diff --cached --binary --no-ext-diff "
        f"--output={shlex.quote(str(out))} {shlex.quote(base)}"
    )
    launch = HarnessLaunch([*SHELL, "-c", script], dict(GIT_ISOLATION))
    result = await runtime.execute(sandbox, launch, timeout_s, sandbox.logs / "diff", Wall())
    if result.timed_out:
        raise WorkspaceError(f"git diff ran longer than {timeout_s:g}s")
    if result.exit_code != 0:
        detail = result.stderr_tail.strip()[-_ERROR_TAIL:]
        raise WorkspaceError(f"git diff failed (exit {result.exit_code}): {detail}")
    return _bounded_artifact(out, max_bytes)


def _bounded_artifact(path: Path, max_bytes: int) -> Artifact:
    content, size = read_head(path, max_bytes)
    truncated = size > len(content)
    if truncated and b"\n" in content:
        content = content[: content.rindex(b"\n") + 1]
    return Artifact(
        name=DIFF_ARTIFACT,
        media_type="text/x-diff",
        content=content,
        truncated=truncated,
        original_size=size,
    )
