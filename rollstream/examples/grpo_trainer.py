"""The example trainer: GRPO on the reference backend's tiny model, closing the loop.

Scored groups come from :class:`~rollstream.consumers.trainer.TrajectoryStream`; each update
recomputes the sampled tokens' logprobs at the current weights (equal to the recorded ones
on the first step: the trajectories are token-faithful), takes one clipped policy-gradient
step in numpy and syncs the weights as a deployment would: the interceptor pauses and drains,
the backend loads the weights, the new policy version is set on the interceptor and published
on the control topic (nodes stamp it into new sessions), the interceptor resumes, and only
then are the consumed offsets committed.
"""

from __future__ import annotations

import io
import logging
from dataclasses import asdict, dataclass

import aiohttp
import numpy as np

from rollstream.backend.policies.tiny import TinyWeights
from rollstream.backend.policies.tiny_train import (
    Row,
    Sampling,
    grpo_step,
    weights_digest,
    weights_from_bytes,
    weights_to_bytes,
)
from rollstream.consumers.trainer import Batch, Group, TrainerSettings, TrajectoryStream, to_batch
from rollstream.control import PolicyWatcher
from rollstream.errors import ConfigurationError
from rollstream.examples.settings import ExampleTrainerSettings
from rollstream.settings import KafkaSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepReport:
    """One update: what went in, what the step did, which version it produced."""

    step: int
    policy_version: int
    groups: int
    trajectories: int
    rows: int
    tokens: int
    trainable_tokens: int
    rewards: dict[str, list[float | None]]
    mean_reward: float | None
    objective: float
    mean_ratio: float
    clipped_fraction: float
    max_abs_logprob_drift: float
    grad_norm: float
    weights_digest: str

    def line(self) -> str:
        """One log line."""
        reward = "n/a" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        return (
            f"step {self.step} -> policy v{self.policy_version}: {self.groups} groups, "
            f"{self.trajectories} trajectories, {self.trainable_tokens}/{self.tokens} trainable "
            f"tokens, mean reward {reward}, ratio {self.mean_ratio:.4f}, "
            f"clipped {self.clipped_fraction:.1%}, |grad| {self.grad_norm:.4g}, "
            f"logprob drift {self.max_abs_logprob_drift:.2e}"
        )


def rows_of(batch: Batch) -> list[Row]:
    """The batch's rows without their padding, as the tiny trainer takes them."""
    rows = []
    for i, n in enumerate(batch.row_lengths.tolist()):
        rows.append(
            Row(
                ids=batch.input_ids[i, :n].astype(np.int64),
                mask=batch.loss_mask[i, :n] > 0,
                old_logprobs=batch.old_logprobs[i, :n].astype(np.float32),
                advantages=batch.advantages[i, :n].astype(np.float32),
            )
        )
    return rows


class ExampleTrainer:
    """Consumes scored groups, updates the tiny model, syncs it; see the module docs."""

    def __init__(
        self,
        settings: ExampleTrainerSettings,
        stream_settings: TrainerSettings,
        kafka: KafkaSettings,
    ) -> None:
        self.settings = settings
        self.kafka = kafka
        self.stream = TrajectoryStream(stream_settings, settings.consumer_group, kafka)
        self.reports: list[StepReport] = []
        self._http: aiohttp.ClientSession | None = None
        self._weights: TinyWeights | None = None
        self._sampling: Sampling | None = None

    async def start(self) -> None:
        """Fetch the backend's weights, learn the current policy version, join the group."""
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        async with self._http.get(f"{self.settings.backend_url}/admin/weights") as response:
            if response.status != 200:
                raise ConfigurationError(
                    f"{self.settings.backend_url} serves no tiny weights "
                    f"({response.status}: {await response.text()}); run the backend with "
                    "--policy tiny"
                )
            self._weights = weights_from_bytes(await response.read())
            self._sampling = Sampling(
                eos=int(response.headers["x-tiny-eos"]),
                stop_probability=float(response.headers["x-tiny-stop-probability"]),
                temperature=self.settings.temperature,
            )
        async with PolicyWatcher(self.kafka) as watcher:
            version = watcher.version
        await self.stream.start()
        self.stream.policy_version = version
        log.info("example trainer at policy v%d, weights %s", version, self.digest)

    async def stop(self) -> None:
        """Leave the group (uncommitted groups come again) and close the HTTP session."""
        await self.stream.stop()
        if self._http is not None:
            await self._http.close()

    async def __aenter__(self) -> ExampleTrainer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def digest(self) -> str:
        """The current weights' digest."""
        assert self._weights is not None
        return weights_digest(self._weights)

    async def run(self) -> list[StepReport]:
        """Train until ``steps`` updates are done (forever without a limit)."""
        pending: list[Group] = []
        async for group in self.stream.groups():
            pending.append(group)
            if len(pending) < self.settings.groups_per_step:
                continue
            report = await self.step(pending)
            pending = []
            self.reports.append(report)
            log.info(report.line())
            if self.settings.steps is not None and len(self.reports) >= self.settings.steps:
                break
        return self.reports

    async def step(self, groups: list[Group]) -> StepReport:
        """One update on ``groups``, the weight sync, then the commit."""
        assert self._weights is not None and self._sampling is not None
        records = [r for g in groups for r in g.records]
        batch = to_batch(records)
        rows = rows_of(batch)
        weights, stats = grpo_step(
            self._weights, self._sampling, rows, self.settings.learning_rate, self.settings.clip
        )
        version = self.stream.policy_version + 1
        await self.sync(weights, version)
        self._weights = weights
        await self.stream.commit()
        rewards = [r.reward for r in records]
        known = [r for r in rewards if r is not None]
        return StepReport(
            step=len(self.reports) + 1,
            policy_version=version,
            groups=len(groups),
            trajectories=len(records),
            rows=len(rows),
            tokens=int(batch.row_lengths.sum()),
            trainable_tokens=int(batch.loss_mask.sum()),
            rewards={g.group_id: list(g.rewards) for g in groups},
            mean_reward=float(np.mean(known)) if known else None,
            objective=stats.objective,
            mean_ratio=stats.mean_ratio,
            clipped_fraction=stats.clipped_fraction,
            max_abs_logprob_drift=stats.max_abs_logprob_drift,
            grad_norm=stats.grad_norm,
            weights_digest=weights_digest(weights),
        )

    async def sync(self, weights: TinyWeights, version: int) -> None:
        """Pause and drain the interceptor, load the weights, set the version, resume."""
        assert self._http is not None
        admin = self.settings.interceptor_admin
        if admin is not None:
            body = {"drain_timeout_s": self.settings.drain_timeout_s}
            async with self._http.post(f"{admin}/admin/pause", json=body) as response:
                response.raise_for_status()
                drained = await response.json()
                if not drained.get("drained", False):
                    log.warning("weight sync with %s calls in flight", drained.get("in_flight"))
        try:
            async with self._http.post(
                f"{self.settings.backend_url}/admin/weights",
                data=io.BytesIO(weights_to_bytes(weights)),
            ) as response:
                response.raise_for_status()
            if admin is not None:
                # Set directly too: the interceptor's control-topic follower may lag a poll.
                async with self._http.post(
                    f"{admin}/admin/policy-version", json={"version": version}
                ) as response:
                    response.raise_for_status()
            await self.stream.publish_policy_version(
                version, metadata={"weights_digest": weights_digest(weights)}
            )
        finally:
            if admin is not None:
                async with self._http.post(f"{admin}/admin/resume") as response:
                    response.raise_for_status()


def report_dicts(reports: list[StepReport]) -> list[dict[str, object]]:
    """The reports as plain dicts (JSON output, the demo's summary)."""
    return [asdict(r) for r in reports]
