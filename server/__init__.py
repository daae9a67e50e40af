"""The MCP layer of mltriage: tool registration, skills, CLI. No diagnostic logic lives here."""
