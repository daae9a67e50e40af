"""MCP tools: experiments (being written)."""
