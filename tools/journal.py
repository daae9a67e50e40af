"""The debugging journal (journal.md): append one entry per fixed bug, parse entries back into records.

The journal is append-only and shared: several agents (threads, processes) may append at once, and a
human may keep hand-written notes in it. So an append takes an exclusive flock on the file, writes the
whole entry with one O_APPEND write and fsyncs; it never rewrites a byte that is already there.

Entries are markdown (journal_templates/entry.md): an `<a id>` anchor, a `### date — title` heading and
`- **Field**: value` lines. Multi-line values are indented two spaces, so only structure starts at
column 0. The parser also reads the seed format (`### [DATE] - Title` + `**Symptom**: ...` lines).
"""

import datetime as dt
import fcntl
import os
import re
from pathlib import Path
from string import Template

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.failure_modes import FAILURE_MODES
from tools.report import Report

ENTRY_TEMPLATE = Path(__file__).resolve().parent.parent / "journal_templates" / "entry.md"

HEADER = """\
# Training journal

One entry per fixed training bug, newest last: symptom, measured evidence, root cause, fix, result
and the regression test that keeps it fixed. Appended by mltriage `journal_append`; earlier entries
are never rewritten, so add corrections as new entries. Hand-written notes are welcome.

## Debugging Log

"""

NOT_RECORDED = "not recorded"

# label in the markdown -> record field; the parser also accepts the aliases below
FIELDS = {
    "failure mode": "failure_mode", "symptom": "symptom", "evidence": "evidence",
    "root cause": "root_cause", "fix": "fix", "resolution": "resolution",
    "regression test": "test_path", "tags": "tags",
}
ALIASES = {"mode": "failure_mode", "cause": "root_cause", "test": "test_path", "tests": "test_path",
           "smoke test": "test_path", "date": "date", "result": "resolution"}

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ANCHOR = re.compile(r'^<a\s+(?:id|name)="([^"]+)"\s*>\s*(?:</a>)?\s*$')
_FIELD = re.compile(r"^(?:[-*+]\s+)?\*\*([^*\n]+?):?\*\*\s*:?\s?(.*)$")
_DATED_TITLE = re.compile(r"^\[?(\d{4}-\d{2}-\d{2}(?:[ T][\d:]+)?)\]?\s*(?:[—–-]+|:)\s*(.+)$")


class JournalEntry(BaseModel):
    """One journal entry parsed back from the markdown."""

    anchor: str | None = Field(None, description="link target: journal.md#<anchor>")
    date: str | None = None
    title: str
    failure_mode: str | None = None
    symptom: str | None = None
    evidence: list[str] = Field(default_factory=list)
    root_cause: str | None = None
    fix: str | None = None
    resolution: str | None = None
    test_path: str | None = None
    tags: list[str] = Field(default_factory=list)
    extra: dict[str, str] = Field(default_factory=dict, description="other **Field**: lines, by label")
    line: int = Field(description="1-based line of the entry's heading in the journal")


class JournalAppendReport(Report):
    summary_drops = ("markdown",)  # the entry's fields are in `entry`; `markdown` is the same text formatted

    path: str
    anchor: str
    markdown: str = Field(description="the entry exactly as appended")
    created: bool = Field(description="the journal did not exist (or was empty) and got a header")
    entry: JournalEntry

    def headline(self) -> str:
        return (f"appended '{self.entry.title}' to {self.path}#{self.anchor}"
                + (" (new journal)" if self.created else "") + "\n" + self.markdown.rstrip())

    def summary_text(self) -> str:
        """One line: the entry itself is the structured content, so its markdown is not repeated here."""
        return (f"appended '{self.entry.title}' to {self.path}#{self.anchor}" + (" (new journal)" if self.created else ""))


class JournalSearchReport(Report):
    path: str
    exists: bool
    total_entries: int
    query: str | None = None
    failure_mode: str | None = None
    entries: list[JournalEntry] = Field(default_factory=list, description="best match first, then newest first")

    def headline(self) -> str:
        if not self.exists:
            return f"no journal at {self.path} yet: nothing has been recorded"
        what = " and ".join(x for x in (self.query and f"'{self.query}'",
                                        self.failure_mode and f"failure_mode={self.failure_mode}") if x)
        head = f"{len(self.entries)} of {self.total_entries} journal entries" + (f" match {what}" if what else "")
        rows = [f"- #{e.anchor or e.line} {e.date or ''} [{e.failure_mode or '?'}] {e.title}"
                + (f" -> root cause: {e.root_cause}" if e.root_cause else "") for e in self.entries]
        return "\n".join([head, *rows])


# ---------------------------------------------------------------- rendering

def slugify(text: str, limit: int = 60) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug[:limit].rstrip("-") or "entry"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _block(text: str) -> str:
    """A value that may span lines: continuation lines indented so they never read as structure."""
    lines = [ln.rstrip() for ln in text.strip().splitlines()]
    return "\n".join([lines[0], *("  " + ln if ln else "" for ln in lines[1:])])


def _evidence_items(evidence: str | list[str] | None) -> list[str]:
    if evidence is None:
        return []
    raw = evidence.splitlines() if isinstance(evidence, str) else list(evidence)
    items = [re.sub(r"^[-*+]\s+", "", str(x).strip()) for x in raw]
    return [x for x in items if x]


def _required(name: str, value: str | None) -> str:
    if value is None or not str(value).strip():
        raise TriageError(f"{name} is empty", f"Give the {name.replace('_', ' ')} in a sentence; it is what the next reader needs")
    return str(value)


def render_entry(*, anchor: str, date: str, title: str, failure_mode: str, symptom: str, root_cause: str,
                 fix: str, evidence: list[str], resolution: str | None, test_path: str | None,
                 tags: list[str]) -> str:
    ev = "".join("\n  - " + _block(x).replace("\n", "\n  ") for x in evidence) or " " + NOT_RECORDED
    text = Template(ENTRY_TEMPLATE.read_text()).substitute(
        anchor=anchor, date=date, title=_one_line(title), failure_mode=failure_mode,
        symptom=_block(symptom), evidence=ev, root_cause=_block(root_cause), fix=_block(fix),
        resolution=_block(resolution) if resolution and resolution.strip() else NOT_RECORDED,
        test_path=f"`{_one_line(test_path)}`" if test_path and test_path.strip() else NOT_RECORDED,
        tags=", ".join(tags) if tags else NOT_RECORDED,
    )
    return text.rstrip("\n") + "\n"


# ---------------------------------------------------------------- parsing

def _clean(value: str) -> str | None:
    value = value.strip()
    if value.startswith("`") and value.endswith("`") and value.count("`") == 2:
        value = value[1:-1].strip()
    return None if not value or value.lower() in (NOT_RECORDED, "none", "n/a", "-", "—") else value


def _finish(entry: dict, label: str | None, lines: list[str]) -> None:
    if label is None:
        return
    while lines and not lines[-1].strip():
        lines.pop()
    # undo the two-space continuation indent
    lines = [lines[0]] + [ln[2:] if ln.startswith("  ") else ln for ln in lines[1:]] if lines else []
    key = FIELDS.get(label.lower()) or ALIASES.get(label.lower())
    if key == "evidence":
        items, current = [], None
        for ln in lines:
            m = re.match(r"^[-*+]\s+(.*)$", ln)
            if m:
                current = m.group(1).strip()
                items.append(current)
            elif ln.strip() and items and ln.startswith("  "):
                items[-1] += "\n" + ln[2:]
            elif ln.strip():
                items.append(ln.strip())
        entry["evidence"] = [x for x in (_clean(i) for i in items) if x]
    elif key == "tags":
        entry["tags"] = [t for t in (_clean(x) for x in " ".join(lines).split(",")) if t]
    elif key:
        entry[key] = _clean("\n".join(lines))
    else:
        entry.setdefault("extra", {})[label] = "\n".join(lines).strip()


def parse_journal(text: str) -> list[JournalEntry]:
    """Every `###`-level (or deeper, or dated `##`) entry with its fields; anything else is skipped."""
    entries: list[JournalEntry] = []
    entry: dict | None = None
    label: str | None = None
    buf: list[str] = []
    pending_anchor: str | None = None

    def close():
        nonlocal entry, label, buf
        if entry is not None:
            _finish(entry, label, buf)
            entries.append(JournalEntry(**entry))
        entry, label, buf = None, None, []

    for n, line in enumerate(text.splitlines(), start=1):
        if m := _ANCHOR.match(line):
            close()
            pending_anchor = m.group(1)
            continue
        if m := _HEADING.match(line):
            level, heading = len(m.group(1)), m.group(2)
            dated = _DATED_TITLE.match(heading)
            close()
            if level >= 3 or (level == 2 and dated):
                entry = {"title": dated.group(2) if dated else heading, "date": dated.group(1) if dated else None,
                         "anchor": pending_anchor, "line": n}
            pending_anchor = None
            continue
        if entry is None:
            continue
        if (m := _FIELD.match(line)) and not line.startswith(" "):
            _finish(entry, label, buf)
            label, buf = m.group(1).strip(), [m.group(2)]
        elif label is not None:
            buf.append(line)
    close()
    return entries


# ---------------------------------------------------------------- the two operations

def journal_append(path: Path, *, title: str, failure_mode: str, symptom: str, root_cause: str, fix: str,
                   evidence: str | list[str] | None = None, resolution: str | None = None,
                   test_path: str | None = None, tags: list[str] | None = None,
                   today: dt.date | None = None) -> JournalAppendReport:
    """Append one entry to the journal at `path` (created with a header if missing); atomic under concurrency."""
    if failure_mode not in FAILURE_MODES:
        raise TriageError(f"unknown failure_mode {failure_mode!r}",
                          "Use one of: " + ", ".join(FAILURE_MODES))
    title, symptom, root_cause, fix = (_required(k, v) for k, v in (
        ("title", title), ("symptom", symptom), ("root_cause", root_cause), ("fix", fix)))
    tags = [t for t in (_one_line(str(t)).replace(",", " ").strip() for t in tags or []) if t]
    evidence_items = _evidence_items(evidence)
    if path.is_dir():
        raise TriageError(f"journal path {path} is a directory", "Pass a file path such as 'journal.md'")
    if path.parent.exists() and not path.parent.is_dir():
        raise TriageError(f"{path.parent} is a file, so {path.name} cannot be created in it",
                          "Pass a journal path whose folder is a directory")
    date = (today or dt.date.today()).isoformat()
    base = f"{date}-{slugify(title)}"

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise TriageError(f"cannot open the journal {path}: {e.strerror}", "Check the path and its permissions")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes; other appenders wait here
        size = os.fstat(fd).st_size
        existing = os.pread(fd, size, 0) if size else b""
        taken = set(re.findall(rb'<a\s+(?:id|name)="([^"]+)"', existing))
        anchor, i = base, 2
        while anchor.encode() in taken:
            anchor, i = f"{base}-{i}", i + 1
        markdown = render_entry(anchor=anchor, date=date, title=title, failure_mode=failure_mode, symptom=symptom,
                                root_cause=root_cause, fix=fix, evidence=evidence_items, resolution=resolution,
                                test_path=test_path, tags=tags)
        if not existing:
            prefix = HEADER
        elif existing.endswith(b"\n\n"):
            prefix = ""
        else:
            prefix = "\n" if existing.endswith(b"\n") else "\n\n"
        data = (prefix + markdown).encode()
        written = 0
        while written < len(data):  # one write for a regular file; the loop only guards a short write
            written += os.write(fd, data[written:])
        os.fsync(fd)
    except OSError as e:
        raise TriageError(f"could not append to the journal {path}: {e.strerror}", "Check free disk space and permissions")
    finally:
        os.close(fd)
    if not existing:
        _fsync_dir(path.parent)
    entry = parse_journal(markdown)[0]
    entry.line += existing.count(b"\n") + prefix.count("\n")  # where it sits in the file, not in the entry
    return JournalAppendReport(path=str(path), anchor=anchor, markdown=markdown, created=not existing, entry=entry)


def _fsync_dir(directory: Path) -> None:
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def read_journal(path: Path) -> str | None:
    """The journal's text under a shared lock (so a half-written entry is never seen), None if missing."""
    if path.is_dir():
        raise TriageError(f"journal path {path} is a directory", "Pass a file path such as 'journal.md'")
    try:
        with open(path, "rb") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH)
            return f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TriageError(f"cannot read the journal {path}: {e.strerror}", "Check the path and its permissions")


MAX_QUERY_CHARS = 1000
MAX_QUERY_TERMS = 32


def _terms(query: str | None) -> list[str]:
    """The query's distinct words: each costs one pass over every entry, so their number is bounded."""
    if query and len(query) > MAX_QUERY_CHARS:
        raise TriageError(f"query is {len(query)} characters long (at most {MAX_QUERY_CHARS})",
                          "Search with a few words from the symptom or error, e.g. 'nan loss fp16'")
    terms = list(dict.fromkeys((query or "").lower().split()))
    if len(terms) > MAX_QUERY_TERMS:
        raise TriageError(f"query has {len(terms)} distinct words (at most {MAX_QUERY_TERMS})",
                          "Search with the few words that identify the failure, e.g. 'nan loss fp16'")
    return terms


def journal_search(path: Path, query: str | None = None, failure_mode: str | None = None,
                   limit: int = 20) -> JournalSearchReport:
    """Entries matching any word of `query` (most words matched first, then newest) and/or `failure_mode`."""
    if failure_mode is not None and failure_mode not in FAILURE_MODES:
        raise TriageError(f"unknown failure_mode {failure_mode!r}", "Use one of: " + ", ".join(FAILURE_MODES))
    terms = _terms(query)
    text = read_journal(path)
    if text is None:
        return JournalSearchReport(path=str(path), exists=False, total_entries=0, query=query, failure_mode=failure_mode)
    entries = parse_journal(text)
    scored = []
    for index, e in enumerate(entries):
        if failure_mode and e.failure_mode != failure_mode:
            continue
        haystack = " ".join([e.title, e.anchor or "", e.date or "", e.failure_mode or "", e.symptom or "",
                             *e.evidence, e.root_cause or "", e.fix or "", e.resolution or "", e.test_path or "",
                             *e.tags, *e.extra.values()]).lower()
        score = sum(t in haystack for t in terms)
        if terms and not score:
            continue
        scored.append((-score, -index, e))
    scored.sort(key=lambda s: (s[0], s[1]))
    return JournalSearchReport(path=str(path), exists=True, total_entries=len(entries), query=query,
                               failure_mode=failure_mode, entries=[e for *_, e in scored[:limit]])
