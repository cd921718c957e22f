"""The HTML report of a run: each trajectory's tokens by loss mask, rewards, groups.

Facts per trajectory and group (:mod:`.facts`), tokens as HTML (:mod:`.tokens`), the page
(:mod:`.render`, pure) and reading the records from a topic (:mod:`.read`).
"""

from rollstream.dev.report.facts import (
    GroupFacts,
    Reportable,
    RunSummary,
    TrajectoryFacts,
    facts_of,
    groups_of,
    summarize,
)
from rollstream.dev.report.read import ReportInput, read_report_input
from rollstream.dev.report.render import (
    CALL_COLOR,
    MASK0_COLOR,
    MASK1_COLOR,
    TOKEN_BOX_COLOR,
    render_report,
)
from rollstream.dev.report.settings import ReportSettings

__all__ = [
    "CALL_COLOR",
    "MASK0_COLOR",
    "MASK1_COLOR",
    "TOKEN_BOX_COLOR",
    "GroupFacts",
    "ReportInput",
    "ReportSettings",
    "Reportable",
    "RunSummary",
    "TrajectoryFacts",
    "facts_of",
    "groups_of",
    "read_report_input",
    "render_report",
    "summarize",
]
