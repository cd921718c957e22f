"""Random weights for a tiny model, run by the engine's own interpreter (it has torch).

``python -I build_weights.py FOLDER`` reads ``FOLDER/build.json`` (the architecture's
``model_type``, its configuration and a seed) and writes the model with transformers' own
classes, so the tensor names are the architecture's whatever it is. Imports nothing from
rollstream: rollstream is not installed in the engine's venv.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(folder: str) -> None:
    """Write ``config.json`` and the weights into ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(folder)
    spec = json.loads((out / "build.json").read_text())
    torch.manual_seed(spec["seed"])
    config = AutoConfig.for_model(spec["model_type"], **spec["config"])
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)


if __name__ == "__main__":
    main(sys.argv[1])
