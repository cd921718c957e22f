"""The real coding harnesses (Claude Code, Codex, Qwen Code, Pi): installing and launching them."""
