"""A GGUF checkpoint as a plain model folder, run by the engine's own interpreter (it has torch).

``python -I convert_gguf.py PACKAGES GGUF FOLDER``: ``PACKAGES`` holds ``gguf`` and
``accelerate`` (transformers needs both to read a GGUF file; kept out of the engine's venv).
transformers dequantizes the tensors but keeps the model marked quantized and refuses to save
it, so its state dict is copied into a plain model of the same architecture, saved in bfloat16
with the tokenizer and chat template the GGUF carries. Imports nothing from rollstream.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(packages: str, gguf: str, folder: str) -> None:
    """Write the model of ``gguf`` into ``folder``."""
    sys.path.insert(0, packages)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = Path(gguf)
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=torch.float32
    )
    config = loaded.config
    del config.quantization_config  # what the copy is not
    config.dtype = torch.bfloat16
    plain = type(loaded)(config)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


if __name__ == "__main__":
    main(*sys.argv[1:4])
