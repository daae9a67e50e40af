"""MCP tools: journal (being written)."""
