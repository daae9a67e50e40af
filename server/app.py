"""The whole tool surface: importing this module registers every tool, skill resource and prompt."""

from server.core import configure, mcp  # noqa: F401
from server import evidence, probes, journal, triage, live, experiments, skills  # noqa: F401,E402
