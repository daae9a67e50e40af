"""The skill pack on disk: discovery, SKILL.md frontmatter and digests.

Stdlib only, so `mltriage install` and `mltriage serve` read the skills without importing the MCP SDK
(the SEP-2640 extension that serves them lives in `server/skills_extension.py`).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Shipped next to `server/` in the distribution (pyproject puts skills/* in as package data).
SKILLS_DIR = Path(__file__).resolve().parent.parent / "skills"
EXTENSION_ID = "io.modelcontextprotocol/skills"
MIME = "text/markdown"


# --- reading skills -------------------------------------------------------------------------

_KEY = re.compile(r"^([A-Za-z][A-Za-z0-9_-]*):(?:\s+(.*))?$")


def _scalar(raw: str) -> str:
    raw = raw.strip()
    if raw.startswith('"'):
        return json.loads(raw)  # a double-quoted YAML scalar is a JSON string for our purposes
    if raw.startswith("'") and raw.endswith("'"):
        return raw[1:-1].replace("''", "'")
    if ": " in raw or " #" in raw:
        raise ValueError(f"unquoted value contains ': ' or ' #': {raw!r}; quote it")
    return raw


def parse_frontmatter(text: str) -> tuple[dict[str, Any], str]:
    """Split a SKILL.md into (frontmatter, body).

    Reads the YAML subset the Agent Skills spec needs (`key: value`, quoted strings, and one
    nested mapping such as `metadata:`) so the server does not depend on PyYAML.
    """
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise ValueError("SKILL.md must start with a '---' frontmatter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ValueError("frontmatter is not closed by a '---' line") from None
    data: dict[str, Any] = {}
    parent: dict[str, Any] | None = None
    for n, line in enumerate(lines[1:end], start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        nested = line.startswith((" ", "\t"))
        m = _KEY.match(line.strip())
        if not m:
            raise ValueError(f"frontmatter line {n} is not 'key: value': {line!r}")
        key, value = m.group(1), m.group(2)
        if nested:
            if parent is None:
                raise ValueError(f"frontmatter line {n} is indented but follows no mapping key")
            parent[key] = _scalar(value or "")
        elif value is None or not value.strip():
            parent = data[key] = {}
        else:
            parent = None
            data[key] = _scalar(value)
    return data, "\n".join(lines[end + 1:])


@dataclass(frozen=True)
class SkillFile:
    skill: str
    rel: str  # path inside the skill directory, '/'-separated
    path: Path

    @property
    def uri(self) -> str:
        return f"skill://{self.skill}/{self.rel}"

    def manifest(self) -> dict[str, Any]:
        raw = self.path.read_bytes()
        return {"uri": self.uri, "digest": "sha256:" + hashlib.sha256(raw).hexdigest(), "size": len(raw)}


@dataclass(frozen=True)
class Skill:
    name: str
    dir: Path
    frontmatter: dict[str, Any]
    files: tuple[SkillFile, ...]

    @property
    def uri(self) -> str:
        return f"skill://{self.name}/SKILL.md"

    def entry(self) -> dict[str, Any]:
        """The SEP-2640 `Skill` entry: SKILL.md URI, verbatim frontmatter, complete file manifest."""
        frontmatter, _ = parse_frontmatter((self.dir / "SKILL.md").read_text(encoding="utf-8"))
        return {"uri": self.uri, "frontmatter": frontmatter, "resources": [f.manifest() for f in self.files]}


def discover(root: Path = SKILLS_DIR) -> list[Skill]:
    """Every `<root>/<name>/SKILL.md`, with all the files of each skill (SKILL.md first)."""
    skills = []
    for skill_md in sorted(root.glob("*/SKILL.md")):
        d = skill_md.parent
        frontmatter, _ = parse_frontmatter(skill_md.read_text(encoding="utf-8"))
        files = sorted(
            (p for p in d.rglob("*") if p.is_file() and not any(part.startswith((".", "__")) for part in p.relative_to(d).parts)),
            key=lambda p: (p.name != "SKILL.md", p.relative_to(d).as_posix()),
        )
        skills.append(Skill(d.name, d, frontmatter, tuple(SkillFile(d.name, p.relative_to(d).as_posix(), p) for p in files)))
    return skills


def skill_text(name: str) -> str:
    return (SKILLS_DIR / name / "SKILL.md").read_text(encoding="utf-8")
