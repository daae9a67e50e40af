"""MCP tools: skills (being written)."""
