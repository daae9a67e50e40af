"""MCP tools: triage (being written)."""
