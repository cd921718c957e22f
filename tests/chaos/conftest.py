"""Fixtures of the reliability suite (``make chaos``): the fault table's, and the proxy policy's."""

from __future__ import annotations

# A real upstream that answers every route and notes what it served (the proxy policy's row).
from tests.interceptor.test_policy import any_route_upstream  # noqa: F401
