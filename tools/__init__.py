"""mltriage diagnostics: plain Python, no MCP. Each public function returns a pydantic report."""
