"""The launch of each harness: command line, environment, config files (pure)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rollstream.errors import ConfigurationError
from rollstream.sandbox.harnesses import python_entry as entry
from rollstream.sandbox.harnesses.executables import resolve_executable
from rollstream.sandbox.harnesses.install import PACKAGES
from rollstream.sandbox.harnesses.launch import BASE_URL_ENV, SESSION_ENV, HarnessContext
from rollstream.sandbox.harnesses.presets import PRESETS, preset
from rollstream.schemas import ApiKind

CTX = HarnessContext("http://127.0.0.1:8100", "sess-1", "served", "Fix the bug.")
EXE = Path("/opt/bin/harness")


def test_every_preset_passes_session_and_base_url_and_the_instruction() -> None:
    options = {"command": "run {instruction}", "function": "pkg.mod:agent"}
    ctx = HarnessContext(CTX.base_url, CTX.session, CTX.model, CTX.instruction, options)
    for name, p in PRESETS.items():
        launch = p.launch(ctx, EXE)
        assert str(EXE) in launch.argv, name  # run directly, or by sh (opencode)
        given = [*launch.argv, *launch.home_files.values()]
        assert any("Fix the bug." in arg for arg in given), name
        assert launch.env[SESSION_ENV] == "sess-1"
        assert launch.env["ROLLSTREAM_BASE_URL"] == "http://127.0.0.1:8100"


def test_claude_code_speaks_anthropic_with_the_session_as_key() -> None:
    launch = preset("claude-code").launch(CTX, EXE)
    assert preset("claude-code").api is ApiKind.ANTHROPIC_MESSAGES
    assert launch.env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:8100"  # no /v1: the SDK adds it
    assert launch.env["ANTHROPIC_API_KEY"] == "sess-1"
    assert launch.env["IS_SANDBOX"] == "1"
    assert launch.argv[launch.argv.index("--model") + 1] == "served"


def test_codex_gets_a_responses_provider_reading_the_session_env() -> None:
    launch = preset("codex").launch(CTX, EXE)
    overrides = [launch.argv[i + 1] for i, a in enumerate(launch.argv) if a == "-c"]
    assert 'model_provider="rollstream"' in overrides
    assert 'model_providers.rollstream.base_url="http://127.0.0.1:8100/v1"' in overrides
    assert f'model_providers.rollstream.env_key="{SESSION_ENV}"' in overrides
    assert 'model_providers.rollstream.wire_api="responses"' in overrides
    assert launch.argv[-1] == "Fix the bug."  # the prompt comes after every option


def test_compact_at_is_where_each_harness_is_told_to_compact() -> None:
    def launched(name: str, at: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
        ctx = HarnessContext(
            CTX.base_url, CTX.session, CTX.model, CTX.instruction, {"compact_at": at}
        )
        launch = preset(name).launch(ctx, EXE)
        return launch.argv, launch.env, launch.home_files

    # opencode compacts at its context less its answers' limit: told that much more.
    _, _, files = launched("opencode", "17500")
    config = json.loads(files[".config/opencode/opencode.json"])
    assert config["provider"]["rollstream"]["models"]["served"]["limit"] == {
        "context": 17500 + 4096,
        "output": 4096,
    }
    # Claude Code takes no window under 100k: a percentage of that floor, or the window.
    _, env, _ = launched("claude-code", "45000")
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "100000"
    assert env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == "45"
    _, env, _ = launched("claude-code", "150000")
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == "150000"
    assert env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == "100"
    argv, _, _ = launched("codex", "21500")
    assert argv[argv.index("model_auto_compact_token_limit=21500") - 1] == "-c"
    # Unset: each harness's own default.
    assert "CLAUDE_CODE_AUTO_COMPACT_WINDOW" not in preset("claude-code").launch(CTX, EXE).env
    assert not any("auto_compact" in arg for arg in preset("codex").launch(CTX, EXE).argv)
    # A value of only spaces is unset too, not a window of 0 %.
    _, env, _ = launched("claude-code", "  ")
    assert "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE" not in env
    argv, _, _ = launched("codex", " ")
    assert not any("auto_compact" in arg for arg in argv)
    for name in ("opencode", "claude-code", "codex"):
        with pytest.raises(ConfigurationError, match="compact_at must be a positive integer"):
            launched(name, "a lot")


def test_opencode_reads_its_provider_from_home_and_the_instruction_verbatim(
    tmp_path: Path,
) -> None:
    instruction = 'Write "a  b" to out.txt,\nthen stop.'
    ctx = HarnessContext(CTX.base_url, CTX.session, CTX.model, instruction)
    launch = preset("opencode").launch(ctx, EXE)
    assert preset("opencode").api is ApiKind.CHAT_COMPLETIONS
    config = json.loads(launch.home_files[".config/opencode/opencode.json"])
    provider = config["provider"]["rollstream"]
    assert provider["options"] == {
        "baseURL": "http://127.0.0.1:8100/v1",
        "apiKey": "{env:" + SESSION_ENV + "}",  # the key stays out of the file
    }
    assert "served" in provider["models"]
    # Its plugin seeded as installed: no background npm install reaching the registry.
    lock = json.loads(launch.home_files[".config/opencode/package-lock.json"])
    plugin = json.loads(launch.home_files[".config/opencode/package.json"])["dependencies"]
    assert lock["packages"][""]["dependencies"] == plugin
    assert ".config/opencode/node_modules/.keep" in launch.home_files
    assert launch.env["OPENCODE_DISABLE_MODELS_FETCH"] == "1"
    # Run by sh the way the runner would: the instruction reaches stdin byte for byte.
    home = tmp_path / "home"
    for relative, text in launch.home_files.items():
        (home / relative).parent.mkdir(parents=True, exist_ok=True)
        (home / relative).write_text(text)
    fake = tmp_path / "opencode"
    fake.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$HOME/args"; cat > "$HOME/stdin"\n')
    fake.chmod(0o755)
    argv = [str(fake) if a == str(EXE) else a for a in launch.argv]
    subprocess.run(argv, env={"HOME": str(home), "PATH": os.environ["PATH"]}, check=True)
    assert (home / "stdin").read_text() == instruction
    assert (home / "args").read_text().split() == ["run", "--auto", "-m", "rollstream/served"]


def test_kilo_is_opencode_s_recipe_with_only_its_own_provider_enabled() -> None:
    launch = preset("kilo").launch(CTX, EXE)
    config = json.loads(launch.home_files[".config/kilo/kilo.json"])
    assert config["enabled_providers"] == ["rollstream"]  # or it asks its gateway for models
    assert config["provider"]["rollstream"]["options"]["apiKey"] == "{env:" + SESSION_ENV + "}"
    assert not any("opencode" in path for path in launch.home_files)
    assert launch.env["KILO_TELEMETRY_LEVEL"] == "off"
    assert "--auto" in launch.argv[2]  # sh -c's script


def test_mini_swe_agent_gets_the_session_as_litellm_s_key_not_on_its_command_line() -> None:
    launch = preset("mini-swe-agent").launch(CTX, EXE)
    assert launch.env["OPENAI_API_KEY"] == "sess-1"
    assert not any("sess-1" in arg for arg in launch.argv)  # argv is readable by any process
    assert "model.model_kwargs.api_base=http://127.0.0.1:8100/v1" in launch.argv
    assert launch.argv[launch.argv.index("-m") + 1] == "openai/served"
    assert {"-y", "--exit-immediately"} <= set(launch.argv)  # headless: no questions, no wizard
    assert launch.env["MSWEA_CONFIGURED"] == "true"
    assert launch.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"  # no price table download
    assert launch.argv[-2:] == ["-t", "Fix the bug."]


def test_aider_runs_offline_with_its_history_in_home_and_the_instruction_verbatim(
    tmp_path: Path,
) -> None:
    """The launch as a shell runs it: a stand-in aider prints the arguments it got."""
    fake = tmp_path / "aider"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    fake.chmod(0o755)
    launch = preset("aider").launch(_ctx(test="test -s hello.txt"), fake)
    home = tmp_path / "home"
    env = {"PATH": os.environ["PATH"], "HOME": str(home)} | launch.env
    out = subprocess.run(launch.argv, env=env, capture_output=True, text=True, check=True)
    args = json.loads(out.stdout)
    assert args[args.index("--message") + 1] == "Fix 'it' $now"  # not expanded, not split
    assert args[args.index("--chat-history-file") + 1] == f"{home}/.aider.chat.history.md"
    assert args[args.index("--input-history-file") + 1] == f"{home}/.aider.input.history"
    assert args[args.index("--openai-api-base") + 1] == "http://127.0.0.1:8100/v1"
    assert args[args.index("--test-cmd") + 1] == "test -s hello.txt" and "--auto-test" in args
    assert {"--no-check-update", "--analytics-disable", "--no-git", "--yes-always"} <= set(args)
    assert launch.env["OPENAI_API_KEY"] == "sess-1" and "sess-1" not in " ".join(launch.argv)
    # Its model's entry, so aider looks up no price table on the network.
    model = args[args.index("--model") + 1]
    assert model == "openai/served"
    assert json.loads(launch.home_files[".aider.model.metadata.json"])[model]["mode"] == "chat"
    # Without a test, a run is the instruction alone.
    plain = preset("aider").launch(_ctx(), fake)
    assert "--test-cmd" not in plain.argv and "--auto-test" not in plain.argv


#: OpenHands as far as the driver sees it: the LLM's arguments and the message written out, the
#: conversation finished unless told otherwise.
STUB_OPENHANDS = {
    "openhands/__init__.py": "",
    "openhands/sdk/__init__.py": """
import json, os
class LLM:
    def __init__(self, **kw): self.kw = kw
class _State:
    execution_status = os.environ.get("STUB_STATUS", "finished")
class Conversation:
    def __init__(self, agent, workspace, max_iteration_per_run):
        self.agent, self.workspace, self.state = agent, workspace, _State()
    def send_message(self, text): self.text = text
    def run(self):
        with open("seen.json", "w") as out:
            json.dump({"llm": self.agent.kw, "text": self.text, "cwd": self.workspace}, out)
""",
    "openhands/sdk/conversation.py": """
class ConversationExecutionStatus:
    FINISHED = "finished"
""",
    "openhands/tools/__init__.py": "",
    "openhands/tools/preset/__init__.py": "",
    "openhands/tools/preset/default.py": """
def get_default_agent(llm, cli_mode):
    assert cli_mode
    return llm
""",
}


@pytest.mark.parametrize(("status", "code"), [("finished", 0), ("error", 1)])
def test_openhands_driver_calls_the_interceptor_as_the_session(
    tmp_path: Path, status: str, code: int
) -> None:
    for relative, text in STUB_OPENHANDS.items():
        (tmp_path / "lib" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / relative).write_text(text)
    launch = preset("openhands").launch(CTX, Path(sys.executable))
    env = {**launch.env, "PYTHONPATH": str(tmp_path / "lib"), "STUB_STATUS": status}
    done = subprocess.run(launch.argv, cwd=tmp_path, env=env, check=False)
    assert done.returncode == code
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert seen["llm"]["base_url"] == "http://127.0.0.1:8100/v1"
    assert (seen["llm"]["api_key"], seen["llm"]["model"]) == ("sess-1", "openai/served")
    assert (seen["text"], seen["cwd"]) == ("Fix the bug.", str(tmp_path))
    assert not any("sess-1" in arg for arg in launch.argv)


#: Harbor as far as the Terminus-2 driver sees it: the agent runs one command through the
#: environment (what its shell sees, written out) and writes its trajectory file, confirming
#: the completion unless told otherwise.
STUB_HARBOR = {
    "harbor/__init__.py": "",
    "harbor/environments/__init__.py": "",
    "harbor/environments/base.py": """
from dataclasses import dataclass
@dataclass
class ExecResult:
    stdout: str
    stderr: str
    return_code: int
class BaseEnvironment:
    def __init__(self, **kw): self.kw = kw
    def _merge_env(self, env): return env
""",
    "harbor/agents/__init__.py": "",
    "harbor/agents/terminus_2.py": """
import json, os
class Terminus2:
    def __init__(self, **kw): self.kw = kw
    async def setup(self, env): self.env = env
    async def run(self, instruction, env, context):
        shell = await env.exec("env; echo polar > hello.txt")
        with open("seen.json", "w") as out:
            json.dump({"agent": {k: str(v) for k, v in self.kw.items()}, "text": instruction,
                       "shell": shell.stdout, "key": os.environ.get("OPENAI_API_KEY")}, out)
        done = {"function_name": "mark_task_complete"}
        marks = [[done], [done] if os.environ.get("STUB_CONFIRM") == "1" else []]
        steps = [{"source": "agent", "message": f"answer {i}", "tool_calls": m}
                 for i, m in enumerate(marks)]
        with open(os.path.join(self.kw["logs_dir"], "trajectory.json"), "w") as out:
            json.dump({"steps": [{"source": "user"}, *steps]}, out)
""",
    "harbor/models/__init__.py": "",
    "harbor/models/agent/__init__.py": "",
    "harbor/models/agent/context.py": "class AgentContext: pass",
    "harbor/models/task/__init__.py": "",
    "harbor/models/task/config.py": "class EnvironmentConfig: pass",
    "harbor/models/trial/__init__.py": "",
    "harbor/models/trial/paths.py": """
from pathlib import Path
class TrialPaths:
    def __init__(self, trial_dir): self.agent_dir = Path(trial_dir) / "agent"
    def mkdir(self): self.agent_dir.mkdir(parents=True)
""",
}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="the driver refuses to run without tmux")
@pytest.mark.parametrize(("confirm", "code"), [("1", 0), ("0", 1)])
def test_terminus_2_driver_runs_the_agent_here_without_the_key_in_its_shell(
    tmp_path: Path, confirm: str, code: int
) -> None:
    for relative, text in STUB_HARBOR.items():
        (tmp_path / "lib" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "lib" / relative).write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    launch = preset("terminus-2").launch(CTX, Path(sys.executable))
    env = {**launch.env, "PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "lib")}
    done = subprocess.run(
        launch.argv, cwd=work, env={**env, "STUB_CONFIRM": confirm}, capture_output=True, text=True
    )
    assert done.returncode == code, done.stderr
    assert done.stdout.strip() == "answer 1"  # the last answer
    assert (work / "hello.txt").read_text() == "polar\n"  # its commands ran in the workspace
    seen = json.loads((work / "seen.json").read_text())
    assert seen["agent"]["api_base"] == "http://127.0.0.1:8100/v1"
    assert seen["agent"]["model_name"] == "openai/served" and seen["text"] == "Fix the bug."
    assert seen["agent"]["record_terminal_session"] == "False"  # or it installs asciinema
    assert seen["key"] == "sess-1"  # litellm's key, read from the driver's environment...
    assert "sess-1" not in seen["shell"]  # ...and not in the agent's shell
    assert "TMUX_TMPDIR=" in seen["shell"]  # a tmux server of the run's own
    assert not any("sess-1" in arg for arg in launch.argv)


def test_qwen_code_is_configured_from_the_environment() -> None:
    env = preset("qwen-code").launch(CTX, EXE).env
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:8100/v1"
    assert (env["OPENAI_API_KEY"], env["OPENAI_MODEL"]) == ("sess-1", "served")


def test_pi_gets_a_provider_file_in_home() -> None:
    launch = preset("pi").launch(CTX, EXE)
    provider = json.loads(launch.home_files[".pi/agent/models.json"])["providers"]["rollstream"]
    assert provider["baseUrl"] == "http://127.0.0.1:8100/v1"
    assert provider["api"] == "openai-completions"
    assert provider["apiKey"] == SESSION_ENV  # Pi reads the key from this variable
    assert [m["id"] for m in provider["models"]] == ["served"]
    assert launch.env["PI_OFFLINE"] == "1"


def test_gemini_cli_speaks_gemini_with_the_session_as_key_and_no_usage_statistics() -> None:
    launch = preset("gemini-cli").launch(CTX, EXE)
    assert preset("gemini-cli").api is ApiKind.GEMINI
    assert launch.env["GOOGLE_GEMINI_BASE_URL"] == "http://127.0.0.1:8100"  # the SDK adds /v1beta
    assert launch.env["GEMINI_API_KEY"] == "sess-1"
    assert launch.argv == [str(EXE), "-m", "served", "--yolo", "-p", "Fix the bug."]
    settings = json.loads(launch.home_files[".gemini/settings.json"])
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    # A trusted-folder check would stop the headless run; usage statistics phone home.
    assert settings["security"]["folderTrust"]["enabled"] is False
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["general"]["enableAutoUpdate"] is False


def test_unknown_preset_names_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match="claude-code, codex, qwen-code, pi, gemini-cli"):
        preset("cursor")


def _ctx(**options: str) -> HarnessContext:
    return HarnessContext("http://127.0.0.1:8100", "sess-1", "served", "Fix 'it' $now", options)


def test_command_runs_the_task_command_with_the_instruction_shell_quoted() -> None:
    bash = Path("/bin/bash")
    launch = preset("command").launch(_ctx(command="agent --task {instruction} | tee log"), bash)
    assert launch.argv[:2] == ["/bin/bash", "-c"]
    assert launch.argv[2] == "agent --task 'Fix '\"'\"'it'\"'\"' $now' | tee log"
    assert launch.env["ROLLSTREAM_BASE_URL"] == "http://127.0.0.1:8100"
    assert launch.env[SESSION_ENV] == "sess-1" and launch.env["ROLLSTREAM_MODEL"] == "served"


def test_command_keeps_other_braces_and_needs_a_command() -> None:
    launch = preset("command").launch(_ctx(command="awk '{print $1}' f; echo ${HOME}"), EXE)
    assert launch.argv[2] == "awk '{print $1}' f; echo ${HOME}"
    with pytest.raises(ConfigurationError, match=r"harness\.command"):
        preset("command").launch(_ctx(), EXE)


def test_python_runs_the_function_in_a_child_entry_module() -> None:
    launch = preset("python").launch(_ctx(function="agents.mine:solve", pythonpath="/src"), EXE)
    assert launch.argv == [
        str(EXE),
        "-m",
        "rollstream.sandbox.harnesses.python_entry",
        "agents.mine:solve",
        "Fix 'it' $now",
    ]
    assert launch.env["PYTHONPATH"] == "/src" and launch.env[SESSION_ENV] == "sess-1"


@pytest.mark.parametrize("function", ["", "agents.mine", "agents mine:solve", "a:b:c"])
def test_python_needs_an_import_path(function: str) -> None:
    with pytest.raises(ConfigurationError, match=r"function|import path"):
        preset("python").launch(_ctx(function=function), EXE)


def test_python_entry_refuses_what_is_not_an_async_function(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert entry.main(["json:dumps", "x"]) == 2
    assert "not an async function" in capsys.readouterr().err
    assert entry.main(["only-one-argument"]) == 2
    # The entry spells the variable names out to start fast; they must stay the presets'.
    assert (entry.SESSION_ENV, entry.BASE_URL_ENV) == (SESSION_ENV, BASE_URL_ENV)


def test_executables_of_command_and_python_need_no_install(tmp_path: Path) -> None:
    assert resolve_executable("command", tmp_path).name == "bash"
    assert resolve_executable("python", tmp_path).exists()
    with pytest.raises(ConfigurationError, match="not installed"):
        resolve_executable(next(iter(PACKAGES)), tmp_path)
    with pytest.raises(ConfigurationError, match="unknown harness"):
        resolve_executable("cursor", tmp_path)


def test_codex_speaks_websocket_only_when_the_task_says_so() -> None:
    def argv(options: dict[str, str]) -> list[str]:
        ctx = HarnessContext(CTX.base_url, CTX.session, CTX.model, CTX.instruction, options)
        return preset("codex").launch(ctx, EXE).argv

    flag = "model_providers.rollstream.supports_websockets=true"
    assert flag in argv({"transport": "websocket"})
    assert (
        argv({"transport": "websocket"})[argv({"transport": "websocket"}).index(flag) - 1] == "-c"
    )
    assert not any("websockets" in arg for arg in argv({}) + argv({"transport": "http"}))
    with pytest.raises(ConfigurationError, match="transport must be one of http, websocket"):
        argv({"transport": "grpc"})
