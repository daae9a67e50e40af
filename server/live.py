"""MCP tools: live (being written)."""
