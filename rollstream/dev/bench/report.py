"""The sections of RESULTS.md, one per benchmark result (``SECTIONS``), rendered from its JSON."""

from __future__ import annotations

from rollstream.dev.bench.backend import backend_section
from rollstream.dev.bench.cluster_report import cluster_section
from rollstream.dev.bench.console import console_section
from rollstream.dev.bench.fidelity import fidelity_section
from rollstream.dev.bench.instances import instances_section
from rollstream.dev.bench.interceptor import interceptor_section
from rollstream.dev.bench.long_stack import long_stack_section
from rollstream.dev.bench.node_report import node_section
from rollstream.dev.bench.outage import outage_section
from rollstream.dev.bench.pipeline import pipeline_section
from rollstream.dev.bench.publisher_report import publisher_section
from rollstream.dev.bench.reconstruct import reconstruct_section
from rollstream.dev.bench.scale_report import scale_section
from rollstream.dev.bench.state import state_section
from rollstream.dev.bench.stream_report import stream_section
from rollstream.dev.bench.wall import wall_section

SECTIONS = {
    "backend": backend_section,
    "interceptor": interceptor_section,
    "interceptor-vllm": interceptor_section,
    "node": node_section,
    "reconstruct": reconstruct_section,
    "publisher": publisher_section,
    "outage": outage_section,
    "state": state_section,
    "cluster": cluster_section,
    "pipeline": pipeline_section,
    "instances": instances_section,
    "scale": scale_section,
    "stream": stream_section,
    "fidelity": fidelity_section,
    "fidelity-vllm": fidelity_section,
    "wall": wall_section,
    "long-session": long_stack_section,
    "console": console_section,
}
