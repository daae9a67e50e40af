"""The SEP-2640 skills extension: `skills/list` and `skills/get` over the skill pack.

Kept apart from `server/skillpack.py` so reading the skills never imports the MCP SDK, and so
`server/core.py` can pass `extensions=[SkillsExtension()]` to its `MCPServer` without an import cycle.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, PaginatedRequestParams, RequestParams

from server.skillpack import EXTENSION_ID, SKILLS_DIR, discover

# Skills only change when mltriage is upgraded; an hour is a safe freshness hint for listings.
TTL_MS = 3_600_000


class GetSkillParams(RequestParams):
    uri: str


class SkillsExtension(Extension):
    """`skills/list` and `skills/get` over the skills in `root`; the files themselves are resources."""

    identifier = EXTENSION_ID

    def __init__(self, root: Path = SKILLS_DIR) -> None:
        self.root = root

    def methods(self) -> list[MethodBinding]:
        return [
            MethodBinding("skills/list", PaginatedRequestParams, self._list),
            MethodBinding("skills/get", GetSkillParams, self._get),
        ]

    async def _list(self, ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams) -> dict[str, Any]:
        # Ten small skills: one page, no cursor.
        return {"skills": [s.entry() for s in discover(self.root)], "ttlMs": TTL_MS, "cacheScope": "public"}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: GetSkillParams) -> dict[str, Any]:
        for s in discover(self.root):
            if s.uri == params.uri:
                return {"skill": s.entry(), "ttlMs": TTL_MS, "cacheScope": "public"}
        known = ", ".join(s.uri for s in discover(self.root))
        raise MCPError(INVALID_PARAMS, f"{params.uri!r} is not a skill this server serves; known: {known}")
