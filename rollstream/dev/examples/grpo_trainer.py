"""The example trainer: GRPO on the reference backend's tiny model, closing the loop.

Scored groups come from :class:`~rollstream.consumers.trainer.TrajectoryStream`; each update
recomputes the sampled tokens' logprobs at the current weights (equal to the recorded ones
on the first step: the trajectories are token-faithful), takes one clipped policy-gradient
step in numpy and syncs the weights as a deployment would: the interceptor pauses and drains,
the backend loads the weights, the new policy version is set on the interceptor and published
on the control topic (nodes stamp it into new sessions), the interceptor resumes, and only
then are the consumed offsets committed.

When the drain does not complete (calls still in flight when ``drain_timeout_s`` ends), the
sync is skipped: the interceptor resumes at once and nothing else changes (weights served,
policy version, commits). A call in flight across a weight swap would carry tokens of two
policies under one version; waiting longer would hold every harness at the gate for as long as
the slowest call. Training goes on with the updated weights, which the next step's sync deploys
with its own update; its commit then covers the groups of both steps, so a restart in between
re-reads them against the weights still served.
"""

from __future__ import annotations

import io
import logging
from dataclasses import asdict, dataclass

import aiohttp
import numpy as np

from rollstream.consumers.trainer import Batch, Group, TrainerSettings, TrajectoryStream, to_batch
from rollstream.dev.backend.policies.tiny import TinyWeights
from rollstream.dev.backend.policies.tiny_train import (
    Row,
    Sampling,
    grpo_step,
    weights_digest,
    weights_from_bytes,
    weights_to_bytes,
)
from rollstream.dev.examples.settings import ExampleTrainerSettings
from rollstream.errors import ConfigurationError
from rollstream.http_auth import auth_headers
from rollstream.kafka.control import PolicyWatcher
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
    synced: bool = True

    def line(self) -> str:
        """One log line."""
        reward = "n/a" if self.mean_reward is None else f"{self.mean_reward:.3f}"
        synced = "" if self.synced else " (not synced: the drain timed out)"
        return (
            f"step {self.step} -> policy v{self.policy_version}{synced}: {self.groups} groups, "
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
                # A sampled token without its recorded logprob has no importance ratio.
                mask=batch.logprob_mask[i, :n] > 0,
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
        self.skipped_syncs = 0
        """Syncs skipped because the interceptor's drain did not complete."""
        self._unsynced = False
        self._http: aiohttp.ClientSession | None = None
        self._weights: TinyWeights | None = None
        self._sampling: Sampling | None = None

    async def start(self) -> None:
        """Fetch the backend's weights, learn the current policy version, join the group."""
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))
        async with self._http.get(
            f"{self.settings.backend_url}/admin/weights",
            headers=auth_headers(self.settings.backend_token),
        ) as response:
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
        if self._unsynced:  # the last update is not deployed yet: one more try
            await self._sync_and_commit(self.stream.policy_version + 1)
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
        self._weights = weights
        self._unsynced = True
        synced = await self._sync_and_commit(self.stream.policy_version + 1)
        rewards = [r.reward for r in records]
        known = [r for r in rewards if r is not None]
        return StepReport(
            step=len(self.reports) + 1,
            policy_version=self.stream.policy_version,
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
            synced=synced,
        )

    async def _sync_and_commit(self, version: int) -> bool:
        """Deploy the current weights as ``version`` and commit; False if the sync was skipped."""
        assert self._weights is not None
        if not await self.sync(self._weights, version):
            return False
        self._unsynced = False
        await self.stream.commit()
        return True

    async def sync(self, weights: TinyWeights, version: int) -> bool:
        """Pause and drain the interceptor, load the weights, set the version, resume.

        Returns False, having loaded and published nothing, when the drain did not complete
        (see the module docs). The interceptor is resumed whatever happens once the pause was
        asked for: its gate no longer reopens on its own.
        """
        admin = self.settings.interceptor_admin
        if admin is None:
            await self._deploy(weights, version)
            return True
        try:
            if not await self._pause(admin):
                return False
            await self._deploy(weights, version)
            return True
        finally:
            async with self._client().post(
                f"{admin}/admin/resume", headers=auth_headers(self.settings.interceptor_token)
            ) as response:
                response.raise_for_status()

    async def _pause(self, admin: str) -> bool:
        """Pause the interceptor; whether every call in flight ended within the drain timeout."""
        drain = self.settings.drain_timeout_s
        async with self._client().post(
            f"{admin}/admin/pause",
            json={"drain_timeout_s": drain},
            headers=auth_headers(self.settings.interceptor_token),
            # The interceptor answers only once drained or after the drain timeout.
            timeout=aiohttp.ClientTimeout(total=drain + 30),
        ) as response:
            response.raise_for_status()
            answer = await response.json()
        if answer.get("drained") is True:
            return True
        self.skipped_syncs += 1
        log.warning(
            "weight sync skipped: %s call(s) still in flight after the %.1f s drain; the "
            "interceptor resumes, policy v%d stays served, the next step syncs this update "
            "(%d skipped so far)",
            answer.get("in_flight"),
            drain,
            self.stream.policy_version,
            self.skipped_syncs,
        )
        return False

    async def _deploy(self, weights: TinyWeights, version: int) -> None:
        """Load the weights into the backend and make ``version`` the current policy."""
        http = self._client()
        async with http.post(
            f"{self.settings.backend_url}/admin/weights",
            data=io.BytesIO(weights_to_bytes(weights)),
            headers=auth_headers(self.settings.backend_token),
        ) as response:
            response.raise_for_status()
        admin = self.settings.interceptor_admin
        if admin is not None:
            # Set directly too: the interceptor's control-topic follower may lag a poll.
            async with http.post(
                f"{admin}/admin/policy-version",
                json={"version": version},
                headers=auth_headers(self.settings.interceptor_token),
            ) as response:
                response.raise_for_status()
        await self.stream.publish_policy_version(
            version, metadata={"weights_digest": weights_digest(weights)}
        )

    def _client(self) -> aiohttp.ClientSession:
        assert self._http is not None, "call start() first"
        return self._http


def report_dicts(reports: list[StepReport]) -> list[dict[str, object]]:
    """The reports as plain dicts (JSON output, the demo's summary)."""
    return [asdict(r) for r in reports]
