"""MCP tools: evidence (being written)."""
