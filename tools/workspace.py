"""Workspace confinement: every path a tool touches resolves inside the workspace (or an allowed read root)."""

import os
from dataclasses import dataclass, field
from pathlib import Path

from tools.errors import TriageError


@dataclass
class Workspace:
    root: Path
    allow_read: list[Path] = field(default_factory=list)

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.allow_read = [Path(p).resolve() for p in self.allow_read]

    def _resolve(self, path: str | os.PathLike, roots: list[Path], verb: str) -> Path:
        raw = str(path)
        if not raw.strip():
            raise TriageError("empty path", "Pass a path relative to the workspace, e.g. 'logs/train.log'")
        if "\x00" in raw:
            raise TriageError("path contains a NUL byte", "Pass a plain file path")
        p = Path(raw).expanduser()
        # resolve() follows symlinks, so a link that points outside is judged by its target
        resolved = (p if p.is_absolute() else self.root / p).resolve()
        if not any(resolved == r or resolved.is_relative_to(r) for r in roots):
            where = ", ".join(str(r) for r in roots)
            raise TriageError(
                f"{raw!r} resolves to {resolved}, outside the {verb} roots ({where})",
                "Use a path inside the workspace" + (
                    " or start the server with --allow-read DIR for logs kept elsewhere" if verb == "read" else ""),
            )
        return resolved

    def read_path(self, path: str | os.PathLike) -> Path:
        return self._resolve(path, [self.root, *self.allow_read], "read")

    def write_path(self, path: str | os.PathLike) -> Path:
        return self._resolve(path, [self.root], "write")

    def existing_file(self, path: str | os.PathLike) -> Path:
        """A readable regular file inside the read roots, or a TriageError saying what is wrong."""
        p = self.read_path(path)
        if not p.exists():
            raise TriageError(f"{path!r} does not exist (looked at {p})",
                              "Check the path; paths are relative to the workspace " + str(self.root))
        if p.is_dir():
            raise TriageError(f"{path!r} is a directory, not a file", "Pass the file inside it")
        if not os.access(p, os.R_OK):
            raise TriageError(f"{path!r} is not readable (permission denied)",
                              "Fix its permissions or copy it into the workspace")
        return p
