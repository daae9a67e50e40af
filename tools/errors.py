"""The one error type tools raise for bad input; the server turns it into an MCP ToolError."""


class TriageError(Exception):
    """`what` went wrong and `fix`: what the caller should do about it."""

    def __init__(self, what: str, fix: str = ""):
        self.what, self.fix = what, fix
        super().__init__(f"{what}. {fix}".strip() if fix else what)
