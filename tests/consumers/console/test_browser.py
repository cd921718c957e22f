"""The console in a real browser, against a live stack: headless Chromium driven by Playwright.

The local stack (reference backend, interceptor, reconstructor, scorer, node) runs the demo's
tasks on the ``python`` harness while the browser watches. The test checks what a user sees:
the page refuses a wrong token, the fleet's numbers move as sessions run, the session list and
the groups fill, a trajectory opens with its tokens coloured by loss mask and its system prompt
collapsed, and the control token pauses and resumes capture. Each page's screenshot is kept in
``ROLLSTREAM_TEST_ARTIFACTS`` (default ``test-artifacts/``) under ``console/``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from pydantic import SecretStr

from rollstream.consumers.console import Assets, Console, ConsoleSettings
from rollstream.consumers.reconstruct.threads import threads_of
from rollstream.dev.backend.tokenizer import default_tokenizer_dir
from rollstream.dev.demo.run import TASKS, run_tasks, task_document
from rollstream.dev.stack.local import LocalStack
from rollstream.dev.stack.processes import StackState
from rollstream.dev.stack.settings import StackSettings
from rollstream.dev.stack.tokens import StackTokens
from rollstream.models.tokenizer import ChatTokenizer
from rollstream.schemas import TopicNames
from rollstream.settings import KafkaSettings, StatePaths
from tests.consumers.console.conftest import Publish
from tests.consumers.console.records import rebuilt
from tests.sandbox.harnesses.spawning import spawn_task, spawning_session
from tests.schemas.samples import TRAJECTORY
from tests.waiting import until

pytestmark = [pytest.mark.integration]

CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(os.environ.get("ROLLSTREAM_TEST_ARTIFACTS", "test-artifacts")) / "console"
CONTROL = SecretStr("browser-control-token-0123")
#: Flags for Chromium on a machine without a network beyond loopback (it would try Google's).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

if CHROMIUM is None:
    pytestmark.append(
        pytest.mark.skip(reason="chromium not installed (`make test` installs Debian's package)")
    )


@pytest.fixture
async def stack(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[StackState, StackTokens]]:
    """The local stack on the session's broker, with this test's topics."""
    # The session's broker: the stack starts one of its own only when none is configured.
    monkeypatch.setenv("ROLLSTREAM_BOOTSTRAP_SERVERS", kafka_settings.bootstrap_servers)
    paths = StatePaths()
    local = LocalStack(
        StackSettings(backend_port=0, interceptor_port=0, admin_port=0, node_port=0), paths
    )
    state = await local.up(kafka_settings)
    try:
        yield state, StackTokens.kept(paths.state_dir)
    finally:
        local.down()


@pytest.fixture
async def console(
    stack: tuple[StackState, StackTokens], kafka_settings: KafkaSettings
) -> AsyncIterator[Console]:
    """The console of that stack, with the control token, on the built front end."""
    assets = Assets()
    if assets.missing():
        pytest.fail(f"the console's front end is not built: {assets.missing()} (make console)")
    state, tokens = stack
    admin = state.admin_url()
    assert admin is not None
    settings = ConsoleSettings(
        port=0, control_token=CONTROL, interceptors=(admin,), admin_token=tokens.interceptor
    )
    async with Console(
        settings, kafka_settings, ChatTokenizer(default_tokenizer_dir()), assets=assets
    ) as running:
        yield running


async def _number(page: object, testid: str) -> int:
    text = await page.get_by_test_id(testid).inner_text()  # type: ignore[attr-defined]
    digits = "".join(c for c in text if c.isdigit())
    return int(digits or 0)


async def _paused(state: StackState, wanted: bool) -> bool:
    """Whether the stack's interceptor says it is paused (``wanted``) or not."""
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{state.admin_url()}/health") as reply,
    ):
        return bool((await reply.json())["paused"]) is wanted


async def test_the_console_in_a_browser_follows_a_live_run(
    console: Console, stack: tuple[StackState, StackTokens]
) -> None:
    from playwright.async_api import async_playwright, expect

    state, tokens = stack
    node = state.url("node")
    assert node is not None and CHROMIUM is not None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    docs = [
        task_document("b", name, instruction, evaluator, 2, "python")
        for name, instruction, evaluator in TASKS[:2]
    ]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            page = await context.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))

            # A wrong token: the page says it was refused, and shows no data.
            await page.goto(f"{console.base_url}#token=not-the-token")
            await expect(page.get_by_test_id("auth-error")).to_be_visible()
            await page.screenshot(path=ARTIFACTS / "refused.png")

            # The control token: the fleet, live, with the controls.
            await page.goto(console.base_url + f"#token={CONTROL.get_secret_value()}")
            await expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=15_000)
            await expect(page.get_by_test_id("control-pause")).to_be_visible()
            calls_before = await _number(page, "fleet-calls")
            run = asyncio.create_task(run_tasks(node, docs, lambda _: None, 240, tokens.node))
            try:

                async def moved() -> bool:
                    return await _number(page, "fleet-calls") > calls_before

                await until(moved, timeout=120, what="the fleet's calls to move")
                await expect(page.get_by_test_id("rate-row").first).to_be_visible()
                await page.screenshot(path=ARTIFACTS / "fleet.png", full_page=True)
                await asyncio.wait_for(run, 300)
            finally:
                run.cancel()
            await until(
                lambda: console.rewards.groups and len(console.index.places) == 4,
                timeout=120,
                what="four scored trajectories",
            )
            await expect(page.get_by_test_id("fleet-ended")).to_have_text("4", timeout=10_000)

            # Sessions: four, filterable; one opens its trajectory.
            await page.get_by_test_id("nav-sessions").click()
            await expect(page.get_by_test_id("session-row")).to_have_count(4, timeout=10_000)
            await page.get_by_test_id("filter-task").fill(docs[0]["task_id"])
            await expect(page.get_by_test_id("session-row")).to_have_count(2, timeout=10_000)
            await page.screenshot(path=ARTIFACTS / "sessions.png", full_page=True)

            # Groups: two, with rewards and advantages, and the reward charts drawn.
            await page.get_by_test_id("nav-groups").click()
            await expect(page.get_by_test_id("group-row")).to_have_count(2, timeout=10_000)
            await expect(page.get_by_test_id("chart-reward-time").locator("canvas")).to_be_visible()
            await page.screenshot(path=ARTIFACTS / "groups.png", full_page=True)

            # A trajectory: tokens by loss mask, the system prompt collapsed until asked for.
            await page.get_by_test_id("nav-sessions").click()
            await page.get_by_test_id("open-trajectory").first.click()
            await expect(page.get_by_test_id("trajectory")).to_be_visible(timeout=15_000)
            trajectory_id = page.url.split("#/trajectory/", 1)[1].split("?", 1)[0]
            trajectory_id = urllib.parse.unquote(trajectory_id)
            sampled = page.locator(".t.m1")
            await expect(sampled.first).to_be_visible()
            title = await sampled.first.get_attribute("title")
            assert title is not None and "logprob" in title
            await expect(page.get_by_test_id("timeline-call").first).to_be_visible()
            await expect(page.get_by_test_id("logprob-strip").locator("canvas")).to_be_visible()
            await page.screenshot(path=ARTIFACTS / "trajectory.png", full_page=True)
            shown = await page.locator(".t").count()
            collapsed = page.get_by_test_id("expand-prefix")
            if await collapsed.count():
                await collapsed.first.click()
                await expect(page.locator(".t")).not_to_have_count(shown)

            # A control: pause and resume capture on the stack's interceptor.
            await page.get_by_test_id("control-pause").click()
            await until(lambda: _paused(state, True), timeout=30, what="paused")
            await expect(page.get_by_test_id("control-result")).to_contain_text("pause: ok")
            await page.get_by_test_id("control-resume").click()
            await until(lambda: _paused(state, False), timeout=30, what="resumed")

            # Replay with another strategy, then compare the two builds of one session.
            await page.get_by_test_id("replay-strategy").fill("per_call")
            await page.get_by_test_id("control-replay").click()
            replayed = f"{console.feed.names.trajectories}.per_call"
            opened = console.index.find(trajectory_id, None)
            assert opened is not None
            await until(
                lambda: console.index.by_session.get(opened.session_id, {}).get(replayed),
                timeout=60,
                what="the replay's trajectory of the opened session",
            )
            await page.reload()
            await page.get_by_test_id("compare-link").filter(has_text=replayed).click()
            await expect(page.get_by_test_id("compare-side")).to_have_count(2, timeout=15_000)
            sides = page.get_by_test_id("compare-side")
            await expect(sides.nth(1)).to_contain_text("per_call")
            await page.screenshot(path=ARTIFACTS / "compare.png", full_page=True)

            # Back on the fleet: every consumer group of the stack with its lag.
            await page.get_by_test_id("nav-fleet").click()
            await expect(page.get_by_test_id("lag-row").first).to_be_visible(timeout=20_000)
            await page.screenshot(path=ARTIFACTS / "fleet-after.png", full_page=True)
            assert errors == [], errors
        finally:
            await browser.close()


#: The token colours of the front end's stylesheet: nothing else on the page uses them.
MASK1_RGB = (0x8F, 0xDC, 0x9A)
MASK0_RGB = (0xDD, 0xE3, 0xEC)


def _pixels_of(png: Path, rgb: tuple[int, int, int]) -> int:
    import numpy as np
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("RGB"))
    return int(np.all(pixels == np.array(rgb, np.uint8), axis=2).sum())


async def test_a_report_is_the_same_views_in_one_file(tmp_path: Path) -> None:
    from playwright.async_api import async_playwright, expect

    from rollstream.consumers.console.report import ReportInput, report_data
    from rollstream.consumers.console.trajectory_view import TokenTexts
    from tests.consumers.console.records import conversation, scored

    tokenizer = ChatTokenizer(default_tokenizer_dir())
    segment = conversation(
        tokenizer,
        "Fix the test </script><b>",
        [("I will read the file first.", "ok"), ("Done.", "")],
    )
    found = ReportInput("p.scored")
    for record in (scored("t-0", "g", 0, [segment], 1.0), scored("t-1", "g", 1, [segment], 0.0)):
        found.add(record)
    data = report_data(found, TokenTexts(tokenizer), {}, notes=["two samples"], generated="now")
    page_file = tmp_path / "report.html"
    page_file.write_text(Assets().static_page(data), encoding="utf-8")
    assert CHROMIUM is not None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            await page.goto(page_file.as_uri() + "#/sessions")
            await expect(page.get_by_test_id("live-status")).to_have_text("report")
            await expect(page.get_by_test_id("session-row")).to_have_count(2)
            await page.get_by_test_id("nav-groups").click()
            await expect(page.get_by_test_id("group-row")).to_have_count(1)
            await page.goto(page_file.as_uri() + "#/trajectory/t-0")
            await expect(page.get_by_test_id("trajectory")).to_be_visible()
            # The task's own text is shown as text, not taken for markup.
            await expect(page.get_by_test_id("segment").first).to_contain_text("</script><b>")
            shot = ARTIFACTS / "report-trajectory.png"
            await page.screenshot(path=shot, full_page=True)
            sampled = await page.locator(".t.m1").count()
            assert sampled == sum(segment.loss_mask)
            assert _pixels_of(shot, MASK1_RGB) > 1000 and _pixels_of(shot, MASK0_RGB) > 1000
            assert errors == [], errors
        finally:
            await browser.close()


async def test_a_real_sub_agent_s_thread_shows_under_its_parent(
    kafka_settings: KafkaSettings,
    rollstream_topics: TopicNames,
    publish: Publish,
    tmp_path: Path,
) -> None:
    """Claude Code delegates to a sub-agent (its Agent tool): the viewer shows the tree."""
    from playwright.async_api import async_playwright, expect

    records = await spawning_session("claude-code", kafka_settings, tmp_path)
    threads = threads_of(records)
    main, sub = threads
    assert sub.agent is not None and sub.spawned_by in main.call_ids
    assert TRAJECTORY.task is not None
    task = TRAJECTORY.task.model_copy(update={"instruction": spawn_task("claude-code")})
    trajectory = rebuilt(records, "tree", threads=threads, task=task)
    await publish(rollstream_topics.trajectories, [trajectory])
    assets = Assets()
    if assets.missing():
        pytest.fail(f"the console's front end is not built: {assets.missing()} (make console)")
    settings = ConsoleSettings(port=0, token=CONTROL)
    tokenizer = ChatTokenizer(default_tokenizer_dir())
    assert CHROMIUM is not None
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    async with (
        Console(settings, kafka_settings, tokenizer, assets=assets) as console,
        async_playwright() as playwright,
    ):
        await until(lambda: console.index.find(trajectory.trajectory_id, None), what="the index")
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            escaped = urllib.parse.quote(trajectory.trajectory_id, safe="")
            await page.goto(f"{console.base_url}#token={CONTROL.get_secret_value()}")
            await expect(page.get_by_test_id("live-status")).to_have_text("live", timeout=15_000)
            await page.goto(f"{console.base_url}#/trajectory/{escaped}")
            tree = page.get_by_test_id("thread-tree")
            await expect(tree).to_be_visible(timeout=15_000)
            # The sub-agent is a branch of the main thread, named by the call that spawned it.
            nested = tree.locator("li li")
            await expect(nested).to_have_count(1)
            await expect(nested).to_contain_text(f"agent {sub.agent}")
            await expect(nested).to_contain_text(f"spawned by call {sub.spawned_by}")
            await expect(tree.locator("li").first).to_contain_text(
                f"main thread · {len(main.call_ids)} calls"
            )
            # Claude Code's instructions alone are longer than the tokens a segment sends: each
            # segment still shows what the policy sampled, and the counts are the segments'.
            segments = page.get_by_test_id("segment")
            await expect(segments).to_have_count(len(trajectory.segments))
            for k, segment in enumerate(trajectory.segments):
                await expect(segments.nth(k).locator(".t.m1").first).to_be_visible()
                await expect(segments.nth(k)).to_contain_text(
                    f"{sum(segment.loss_mask):,} trainable"
                )
            await expect(page.get_by_test_id("unsent-prefix").first).to_be_visible()
            trainable = sum(sum(s.loss_mask) for s in trajectory.segments)
            await expect(page.get_by_test_id("facts")).to_contain_text(f"({trainable:,} trainable)")
            # Its calls are on the timeline, labelled with the agent.
            await expect(page.locator(".timeline-label", has_text=sub.agent)).to_have_count(
                len(sub.call_ids)
            )
            await page.screenshot(path=ARTIFACTS / "threads.png", full_page=True)
            assert errors == [], errors
        finally:
            await browser.close()
