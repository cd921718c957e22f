"""Run the OpenHands agent headless on one instruction: the openhands preset's driver.

OpenHands (``openhands-sdk`` with ``openhands-tools``) is a library without a command line, so
the preset runs this file with the Python of the harness's own venv, in the session's workspace:
``python openhands_run.py INSTRUCTION``. It imports OpenHands only (rollstream is not in that
venv) and reads where and as whom to call from the environment the preset sets
(``ROLLSTREAM_BASE_URL``, ``ROLLSTREAM_SESSION``, ``ROLLSTREAM_MODEL``). The agent is
OpenHands' default one without browser tools (terminal, file editor, task tracker, finish,
think); the run ends when it calls ``finish`` or answers without a tool call. Exit 0 when the
conversation finished, 1 otherwise.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str]) -> int:
    """Run one conversation on ``argv[1]`` in the current directory."""
    from openhands.sdk import LLM, Conversation  # type: ignore[import-not-found]
    from openhands.sdk.conversation import (  # type: ignore[import-not-found]
        ConversationExecutionStatus,
    )
    from openhands.tools.preset.default import get_default_agent  # type: ignore[import-not-found]

    llm = LLM(
        model=f"openai/{os.environ['ROLLSTREAM_MODEL']}",  # litellm's OpenAI-compatible route
        base_url=f"{os.environ['ROLLSTREAM_BASE_URL']}/v1",
        api_key=os.environ["ROLLSTREAM_SESSION"],
        usage_id="agent",
    )
    agent = get_default_agent(llm=llm, cli_mode=True)
    conversation = Conversation(agent=agent, workspace=os.getcwd(), max_iteration_per_run=50)
    conversation.send_message(argv[1])
    conversation.run()
    finished = conversation.state.execution_status == ConversationExecutionStatus.FINISHED
    return 0 if finished else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
