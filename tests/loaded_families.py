"""Model families as the tests load them: once per test process, shared by every module.

A family's vocabulary takes seconds to load and 50-250 MB to hold; modules that each kept
their own copies made a pytest worker hold the same vocabularies three times (4 GB workers,
one killed by the kernel's OOM killer with three workers beside a vLLM server).
"""

from __future__ import annotations

import functools

from rollstream.models.families import load_family
from rollstream.models.family import Family


@functools.cache
def loaded_family(name: str) -> Family:
    """Family ``name`` with its vocabulary (stand-ins included), loaded once per process."""
    return load_family(name, stand_in=True)
