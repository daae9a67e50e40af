"""MCP tools: probes (being written)."""
