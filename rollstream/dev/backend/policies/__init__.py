"""Policies of the reference backend: what "the model" samples."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollstream.dev.backend.policies.base import Policy, PolicyError
from rollstream.errors import ConfigurationError

if TYPE_CHECKING:
    from rollstream.dev.backend.settings import BackendSettings
    from rollstream.models.family import Family
    from rollstream.models.tokenizer import ChatTokenizer

__all__ = ["Policy", "PolicyError", "make_policy"]


def default_scenarios_path() -> str:
    """The scenario file shipped with rollstream."""
    from importlib import resources

    return str(resources.files("rollstream.dev.backend").joinpath("data", "scenarios.yaml"))


def make_policy(
    settings: BackendSettings, tokenizer: ChatTokenizer, family: Family | None = None
) -> Policy:
    """The policy the settings name; the scripted one writes its turns in ``family``'s format."""
    if settings.policy == "tiny":
        from rollstream.dev.backend.policies.tiny import TinyPolicy

        return TinyPolicy(tokenizer, seed=settings.seed)
    if settings.policy == "scripted":
        from pathlib import Path

        from rollstream.dev.backend.policies.scenarios import load_scenarios
        from rollstream.dev.backend.policies.scripted import ScriptedPolicy

        path = settings.scenarios or Path(default_scenarios_path())
        scorer = None
        if settings.scripted_logprobs == "tiny":
            from rollstream.dev.backend.policies.tiny import TinyPolicy

            scorer = TinyPolicy(tokenizer, seed=settings.seed)
        return ScriptedPolicy(
            tokenizer, load_scenarios(path), seed=settings.seed, scorer=scorer, family=family
        )
    if settings.policy == "hf":
        from rollstream.dev.backend.policies.hf import HFPolicy

        if settings.hf_model is None:
            raise ConfigurationError("the hf policy needs ROLLSTREAM_BACKEND_HF_MODEL (a folder)")
        return HFPolicy(settings.hf_model, tokenizer, seed=settings.seed)
    raise ConfigurationError(f"unknown policy {settings.policy!r}")
