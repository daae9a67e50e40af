"""Many rank logs as one run: the culprit rank apart from its victims, ranks out of step, stragglers.

A distributed job that fails leaves one log per rank, and most of them say the same misleading thing:
every rank but one died of a collective timeout, a closed connection or the launcher's SIGTERM, *because*
one rank failed first. The culprit is the first real error by time; the others are victims. Logs are read
from the end (a bounded tail per file, in parallel), so 512 logs of 100 MB cost about as much as 512 small
ones.

Layouts: torchrun's `--log-dir` tree (`<dir>/<run_id>/attempt_<n>/<local_rank>/{stdout,stderr}.log` and
torchelastic's `error.json`), Slurm per-task outputs (`slurm-<job>_<task>.out`), `rank<N>.log`, `*.rank<N>.log`.
"""

import calendar
import fnmatch
import json
import os
import re
import stat
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from tools import logfields
from tools.errors import TriageError
from tools.failure_modes import crash_fix, crash_mode
from tools.report import Evidence, Finding, Num, Report, is_finite, mark_nonfinite
from tools.workspace import Workspace, open_regular

# --------------------------------------------------------------------------- which file is which rank

_TORCHRUN = re.compile(r"(?P<run>.*?)/?attempt_(?P<attempt>\d+)/(?P<local>\d+)/(?P<name>stdout\.log|stderr\.log|error\.json)$")
_SLURM = re.compile(r"(?:^|/)slurm-(?P<job>\d+)[_.-](?P<task>\d+)\.(?:out|err|log|txt)$")
_RANK_NAME = re.compile(r"(?:^|[/._-])rank[_-]?(?P<rank>\d+)(?:[._-][^/]*)?$", re.I)
_GLOB_CHARS = re.compile(r"[*?\[]")
MAX_FILES = 8192


def is_rank_spec(w: Workspace, spec: str) -> bool:
    """A glob or a directory (the rank logs of one run) rather than one log file."""
    try:
        mode = os.stat(w.read_path(spec)).st_mode
    except (TriageError, OSError):  # missing, too long a name, unreadable: the single-file path says why
        return bool(_GLOB_CHARS.search(spec))
    # a directory is a rank set; a file whose name happens to hold `[` or `*` is one log
    return stat.S_ISDIR(mode)


def _matches(rel: str, pattern: str) -> bool:
    """Shell-glob match where `*` stays inside one path component and `**` spans any number of them."""
    if "**" in pattern:
        return fnmatch.fnmatchcase(rel, pattern.replace("**/", "*").replace("**", "*"))
    parts, pats = rel.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(fnmatch.fnmatchcase(a, b) for a, b in zip(parts, pats))


def rank_files(w: Workspace, spec: str) -> list[Path]:
    """The files a glob or a directory names. The glob's fixed leading directories are confined like any path, and
    the files under them are listed with the workspace's own walk (no link out followed), never by `glob`."""
    if not _GLOB_CHARS.search(spec) or is_rank_spec(w, spec) and os.path.isdir(w.read_path(spec)):
        # a directory, even one named with `[`
        return w.walk(spec)
    parts = Path(spec).expanduser().parts
    fixed = next(i for i, part in enumerate(parts) if _GLOB_CHARS.search(part))
    base = w.read_path(Path(*parts[:fixed]) if fixed else ".")
    pattern = "/".join(parts[fixed:])
    out = [p for p in w.walk(base)[:MAX_FILES * 4] if _matches(p.relative_to(base).as_posix(), pattern)][:MAX_FILES]
    if not out:
        raise TriageError(f"{spec!r} matches no readable file in the workspace",
                          "Pass the torchrun --log-dir directory, a Slurm output glob such as 'logs/slurm-123_*.out', "
                          "or 'logs/rank*.log'")
    return out


class _File(BaseModel):
    path: Path
    rank: int
    stream: str  # stdout, stderr, error.json, log
    group: str  # the run directory (torchrun) or job id (Slurm) the rank belongs to
    shown: str = ""  # the path as the agent should see it (relative to the workspace)


def identify(files: list[Path]) -> tuple[list[_File], list[Path], list[str]]:
    """(rank files, other files (a launcher's console log, maybe), notes). Only the newest torchrun attempt counts."""
    found, other, notes = [], [], []
    latest: dict[str, int] = {}
    for p in files:
        s = p.as_posix()
        if m := _TORCHRUN.search(s):
            found.append(_File(path=p, rank=int(m["local"]), stream=m["name"].split(".")[0] if m["name"] != "error.json"
                               else "error.json", group=f"{m['run']}#{m['attempt']}"))
            latest[m["run"]] = max(latest.get(m["run"], -1), int(m["attempt"]))
        elif m := _SLURM.search(s):
            found.append(_File(path=p, rank=int(m["task"]), stream="log", group=f"slurm-{m['job']}"))
        elif m := _RANK_NAME.search(p.name):
            found.append(_File(path=p, rank=int(m["rank"]), stream="log", group=str(p.parent)))
        else:
            other.append(p)
    if not found:  # no file per rank: a console log that interleaves the ranks' lines
        for p in [p for p in other if p.suffix in _TEXT_SUFFIXES][:16]:
            found += [_File(path=p, rank=i, stream="mux", group=f"mux:{p}") for i in _mux_ranks(p)]
    if latest:
        old = [f for f in found if "#" in f.group and int(f.group.rsplit("#", 1)[1]) < latest[f.group.rsplit("#", 1)[0]]]
        if old:
            notes.append(f"{len(old)} files of earlier torchrun attempts left out (restarts): the newest attempt is read")
            found = [f for f in found if f not in old]
    groups = sorted({f.group for f in found})
    if len(groups) > 1:
        # several nodes' log trees (or jobs): local ranks repeat, so number the ranks node after node
        size = {g: 1 + max(f.rank for f in found if f.group == g) for g in groups}
        offset, o = {}, 0
        for g in groups:
            offset[g], o = o, o + size[g]
        found = [f.model_copy(update={"rank": offset[f.group] + f.rank}) for f in found]
        notes.append(f"{len(groups)} log groups (nodes or jobs) numbered one after another; a `[rankN]:` prefix in "
                     "the logs overrides that numbering")
    return found, other, notes


# One file, many ranks: torchrun's console (`--tee` prefixes each line with `[default<local rank>]:`) or
# `srun --label` (`<task>: `). Each rank's lines are taken out of the shared tail, and their order in the file is
# the order in which they were written: a time basis as good as a timestamp.
_MUX = re.compile(rb"^(?:\[(?:default|rank)(\d+)\]:|(\d{1,5}): )", re.M)
_MUX_PEEK = 64 << 10
_TEXT_SUFFIXES = {"", ".log", ".out", ".err", ".txt", ".stdout", ".stderr"}


def _mux_ranks(p: Path) -> list[int]:
    """The ranks a console log interleaves (none unless most of its tail is rank-prefixed lines)."""
    try:
        data = _read(p)[0][-_MUX_PEEK:]
    except (OSError, TriageError):
        return []
    ids: dict[int, int] = {}
    for a, b in _MUX.findall(data):
        ids[int(a or b)] = ids.get(int(a or b), 0) + 1
    if len(ids) < 2 or sum(ids.values()) < 0.3 * max(1, data.count(b"\n")):
        return []
    return sorted(ids)


def _demux(data: bytes, at_start: bool, rank: int) -> tuple[bytes, list[int]]:
    """Rank `rank`'s lines of a console tail, prefix removed, and each one's line index in the shared tail."""
    out, where = [], []
    for i, ln in enumerate(data.split(b"\n")):
        if i == 0 and not at_start:
            continue  # cut mid-line
        m = _MUX.match(ln)
        if m and int(m[1] or m[2]) == rank:
            out.append(ln[m.end():])
            where.append(i)
    return b"\n".join(out) + b"\n", where


# --------------------------------------------------------------------------- reading one rank's tail

TAIL_BYTES = 256 << 10
_PREFIX = re.compile(r"^\[(?:rank|default)(\d+)\]:\s?")
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T_](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
_GLOG = re.compile(r"\b[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{1,9})")
_STEP = re.compile(r"(?<![\w.])(?:global_step|step|iteration|iter)['\"]?\s*[:= ]\s*(\d+)", re.I)
# how a rank dies of someone else's failure: the peer went away, the collective timed out, the launcher stopped it
_PEER = re.compile(r"Connection (?:closed|reset) by peer|Broken pipe|remote (?:worker|process|peer)|"
                   r"communicator was aborted|ncclRemoteError|NCCL communicator .*abort|peer (?:closed|disconnected)", re.I)
_TIMEOUT = re.compile(r"timed? ?out|timeout", re.I)
_COLLECTIVE = re.compile(r"gloo|nccl|c10d|collective|ProcessGroup|watchdog|barrier|all_?reduce|all_?gather|broadcast|"
                         r"reduce_?scatter|recv|send|store|rendezvous|DistBackendError|DistNetworkError|WorkNCCL|SeqNum", re.I)
_SIGNAL = re.compile(r"SIGTERM|SIGINT|SIGHUP|signal:? 15\b|Signals\.SIG|SignalException|KeyboardInterrupt|got signal", re.I)


def victim_reason(text: str) -> str | None:
    """Why a rank's error is someone else's failure (None: its own)."""
    if _PEER.search(text):
        return "peer closed the connection"
    if _TIMEOUT.search(text) and _COLLECTIVE.search(text):
        return "collective/watchdog timeout"
    if _SIGNAL.search(text):
        return "stopped by a signal"
    return None


def _stamp(line: str, year: int) -> float | None:
    if m := _ISO.search(line, 0, 64):
        y, mo, d, h, mi, s, frac = m.groups()
        try:
            return calendar.timegm((int(y), int(mo), int(d), int(h), int(mi), int(s))) + float(f"0.{frac or 0}")
        except (ValueError, OverflowError):
            return None
    if m := _GLOG.search(line, 0, 64):
        mo, d, h, mi, s, frac = m.groups()
        try:
            return calendar.timegm((year, int(mo), int(d), int(h), int(mi), int(s))) + float(f"0.{frac}")
        except (ValueError, OverflowError):
            return None
    return None


class RankEvent(BaseModel):
    rank: int
    kind: str = Field(description="traceback, oom, nccl, killed, segfault, nan_inf, warning, or error_file (error.json)")
    time: str | None = Field(None, description="UTC time from the log line's own timestamp, else none")
    text: str
    file: str = Field(description="file and lines from its end")
    victim: str | None = Field(None, description="why this is another rank's failure (peer gone, collective timeout, signal)")


class _Rank:
    """What one rank's files say, read from their ends."""

    def __init__(self, rank: int):
        self.rank, self.files, self.notes = rank, [], []
        self.events: list[tuple[float | None, int, RankEvent]] = []
        self.error: RankEvent | None = None  # the terminal error
        self.error_t: dict[str, float] = {}  # its time by basis: error.json, order (console line), log, mtime
        self.frame: str | None = None
        self.last_step: int | None = None
        self.mtime = 0.0
        self.fields: dict[str, list[float]] = {}  # numeric fields of the last step lines, in order
        self.step_stamps: list[tuple[int, float]] = []
        self.global_rank: int | None = None
        self.bytes = 0


def _read(path: Path) -> tuple[bytes, bool, os.stat_result]:
    with open_regular(path) as f:
        st = os.fstat(f.fileno())
        start = max(0, st.st_size - TAIL_BYTES)
        data = os.pread(f.fileno(), st.st_size - start, start)
    return data, start == 0, st


def _read_error_json(r: _Rank, f: _File, data: bytes, st: os.stat_result) -> None:
    try:
        doc = json.loads(data)
        msg = doc["message"]
        text = msg["message"] if isinstance(msg, dict) else str(msg)
        extra = msg.get("extraInfo", {}) if isinstance(msg, dict) else {}
        ts = float(extra.get("timestamp", st.st_mtime))
        stack = extra.get("py_callstack", "")
    except (ValueError, KeyError, TypeError, AttributeError):
        r.notes.append(f"{f.path.name}: not a torchelastic error file")
        return
    ev = RankEvent(rank=r.rank, kind="error_file", time=_iso(ts), text=text[:600], file=f.shown,
                   victim=victim_reason(text))
    r.events.append((ts, 0, ev))
    frames = _frames(stack.splitlines())
    if r.error is None or r.error.kind != "traceback":
        r.error = ev
    r.error_t["error.json"] = ts
    r.frame = r.frame or (frames[-1] if frames else None)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
_LIBRARY = re.compile(r"/(?:site|dist)-packages/|/lib/python\d|^<frozen|/torch/")


def _frames(lines: list[str]) -> list[str]:
    """The traceback's frames outermost first, library frames left out when the user's own are there."""
    out = [(m["file"], f"{m['file']}:{m['line']} in {(m['func'] or '?').strip()}")
           for m in map(_FRAME.match, lines) if m]
    user = [s for fpath, s in out if not _LIBRARY.search(fpath)]
    return user or [s for _, s in out]


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1000):03d}Z"


# Where a rank's trouble starts in its tail: the first of these (lowercased) is found at memchr speed, and only the
# lines from there on go through tail_log's event parser. A regex over every line of 512 tails is what costs.
_TROUBLE = (b"traceback", b"error", b"memory", b"oom", b"nccl", b"gloo", b"collective", b"watchdog", b"timed out",
            b"timeout", b"segmentation", b"sigsegv", b"sigbus", b"sigabrt", b"sigkill", b"sigterm", b"signal",
            b"killed", b"exit code", b"exitcode", b"core dump", b"fatal", b"bus error", b"terminate called", b"abort")


def _trouble_at(data: bytes) -> int | None:
    low = data.lower()
    found = [i for i in (low.find(w) for w in _TROUBLE) if i >= 0]
    return min(found) if found else None


STEP_LINES = 30  # the last step lines read for the step counter and the step stamps
FIELD_LINES = 12  # of those, the lines whose fields (counters, losses, per-step times) are parsed: the costly part


def _read_log(r: _Rank, f: _File, data: bytes, at_start: bool, st: os.stat_result, order: list[int] | None = None) -> None:
    """`order`: for a rank taken out of a shared console log, each line's index there."""
    from tools import logs  # tools.logs imports this module's report: import its reader when used

    hole = data.rfind(b"\x00")
    if hole >= 0:  # a sparse hole or preallocated space: the text after it is the newest, the rest is older
        data = data[hole + 1:]
        at_start = True  # what follows a hole starts a line
    raw = data.split(b"\n")
    if raw and raw[-1] == b"":
        raw.pop()
    skip = 0 if at_start else 1  # the first line is cut mid-line
    n = len(raw) - skip
    year = time.gmtime(st.st_mtime).tm_year
    cleaned: dict[int, str] = {}

    def line(k: int) -> str:
        """Line k, cleaned once, when something needs it (most lines of a tail never are)."""
        t = cleaned.get(k)
        if t is None:
            t = logs._clean(raw[k + skip])
            if t.startswith("[") and (m := _PREFIX.match(t)):
                if t.startswith("[rank"):
                    r.global_rank = int(m[1])
                t = t[m.end():]
            cleaned[k] = t
        return t

    stamps: dict[int, float | None] = {}

    def stamp_at(k: int) -> float | None:
        """The time of line k: its own stamp, else the nearest earlier line's (a traceback has none of its own)."""
        for j in range(k, max(-1, k - 60), -1):
            if j not in stamps:
                stamps[j] = _stamp(line(j), year)
            if stamps[j] is not None:
                return stamps[j]
        return None

    name = f.shown
    at = _trouble_at(data)
    first = max(0, data.count(b"\n", 0, at) - skip) if at is not None else n
    for e in logs._events([line(k) for k in range(first, n)], 0, lambda i: None):
        k = n - e.line_from_end
        body = f"{e.exception_type}: {e.message}" if e.kind == "traceback" else e.text
        ev = RankEvent(rank=r.rank, kind=e.kind, time=None, text=body[:600], file=f"{name} ({e.line_from_end} lines from the end)",
                       victim=victim_reason(body) if e.kind in ("traceback", "nccl", "killed") else None)
        t = stamp_at(k)
        ev.time = _iso(t)
        r.events.append((t, k, ev))
        # the terminal error: the last traceback, else the last fatal-looking line
        fatal = e.kind in ("traceback", "oom", "segfault", "killed") or (e.kind == "nccl" and ev.victim)
        if fatal and (r.error is None or r.error.kind != "traceback" or e.kind == "traceback"):
            r.error = ev
            if t is not None:
                r.error_t["log"] = t
            if order is not None:
                r.error_t["order"] = order[k]
            else:  # a shared file's mtime is every rank's: no basis
                r.error_t["mtime"] = st.st_mtime
            if e.kind == "traceback":
                lo = k
                while lo > first and (line(lo - 1)[:1].isspace() or line(lo - 1).startswith("Traceback")):
                    lo -= 1
                frames = _frames([line(j) for j in range(lo, k)])
                r.frame = frames[-1] if frames else e.frame
    # the last step lines: their counters, timings and stamps
    seen, fields, stamps_seen = 0, {}, []
    for k in range(n - 1, -1, -1):
        text = line(k)
        m = _STEP.search(text)
        if not m:
            continue
        step = int(m[1])
        if r.last_step is None:
            r.last_step = step
        t = _stamp(text, year)
        if t is not None:
            stamps_seen.append((step, t))
        found = logfields.fields(text)[0] if seen < FIELD_LINES else ()
        for fld in found:
            try:
                v = float(fld.value.replace(",", ""))
            except ValueError:
                continue
            fields.setdefault(fld.key, []).append(v)
        seen += 1
        if seen >= STEP_LINES:
            break
    for key, v in fields.items():  # stdout and stderr of one rank: the file that logs a field gives it
        r.fields[key] = v[::-1]
    if len(stamps_seen) > len(r.step_stamps):
        r.step_stamps = stamps_seen[::-1]


def read_rank(rank: int, files: list[_File]) -> _Rank:
    r = _Rank(rank)
    # error.json first: a traceback in the log, when there is one, is the richer account of the same error
    for f in sorted(files, key=lambda f: f.stream != "error.json"):
        try:
            data, at_start, st = _read(f.path)
        except (OSError, TriageError) as e:
            r.notes.append(f"{f.path.name}: cannot be read ({getattr(e, 'strerror', None) or e})")
            continue
        r.files.append(f.shown or f.path.as_posix())
        r.bytes += st.st_size
        if f.stream == "error.json":
            _read_error_json(r, f, data, st)
            continue
        if f.stream == "mux":
            data, order = _demux(data, at_start, rank)
            _read_log(r, f, data, True, st, order)
            continue
        if data:
            r.mtime = max(r.mtime, st.st_mtime)
        _read_log(r, f, data, at_start, st)
    r.events.sort(key=lambda x: (x[0] is None, x[0] or 0, x[1]))
    return r


# --------------------------------------------------------------------------- the run as a whole

Role = Literal["culprit", "also_failed", "victim", "odd", "straggler", "ok"]


class RankSummary(BaseModel):
    rank: int
    role: Role = Field(description="culprit: failed first on its own; also_failed: its own error, later; victim: died "
                                   "of another rank's failure; odd: counters differ from the others; straggler: slow")
    why: str = ""
    error: str | None = Field(None, description="its terminal error")
    error_kind: str | None = Field(None, description="traceback, oom, nccl, killed, segfault or error_file")
    location: str | None = Field(None, description="file:line of the error (the user's innermost frame)")
    error_time: str | None = None
    last_step: int | None = None
    last_loss: Num = None
    step_time: dict[str, float] = Field(default_factory=dict,
                                        description="median of each per-step time field over the last steps (s or as logged)")
    files: list[str] = Field(default_factory=list)


class RanksReport(Report):
    rank_by = {"ranks": lambda r: r.get("role") != "ok", "events": lambda e: e.get("victim") is None}

    source: str = Field(description="the directory or glob read")
    n_ranks: int
    culprit_rank: int | None = Field(None, description="the rank that failed first on its own")
    culprit_basis: str | None = Field(None, description="how 'first' was decided: error.json, log timestamps, file mtime, "
                                                        "or the only rank with an error of its own")
    victims: list[int] = Field(default_factory=list, description="ranks that died of the culprit's failure")
    odd_ranks: list[int] = Field(default_factory=list, description="ranks whose last step or collective counter differs from the others'")
    diverging_ranks: list[int] = Field(default_factory=list, description="ranks whose loss is non-finite or far from the others'")
    straggler_rank: int | None = None
    straggler_ratio: float | None = Field(None, description="the straggler's per-step time / the median rank's")
    straggler_field: str | None = None
    ranks: list[RankSummary]
    events: list[RankEvent] = Field(description="errors and warnings of all ranks, in time order")
    bytes_total: int = 0
    notes: list[str] = Field(default_factory=list)

    def headline(self) -> str:
        parts = [f"{self.n_ranks} ranks"]
        if self.culprit_rank is not None:
            parts.append(f"culprit rank {self.culprit_rank} ({self.culprit_basis})")
        if self.victims:
            parts.append(f"victims {_ranks(self.victims)}")
        if self.odd_ranks:
            parts.append(f"odd {_ranks(self.odd_ranks)}")
        if self.straggler_rank is not None:
            parts.append(f"straggler rank {self.straggler_rank} ({self.straggler_ratio:.2f}x median {self.straggler_field})")
        return f"{self.source}: " + ", ".join(parts)


def _ranks(rs: list[int]) -> str:
    return ", ".join(map(str, rs[:12])) + (f" (+{len(rs) - 12})" if len(rs) > 12 else "")


def analyse_ranks(files: list[Path], source: str = "", root: Path | None = None) -> RanksReport:
    """Read every rank's tail (bounded, in parallel) and tell culprit, victims, odd ranks and stragglers apart.
    `root`: paths are shown relative to it (the workspace)."""
    found, other, notes = identify(files)
    for f in found:
        f.shown = f.path.relative_to(root).as_posix() if root and f.path.is_relative_to(root) else f.path.as_posix()
    if not found:
        raise TriageError(f"{source or 'the path'} is a directory (or glob) with no rank logs among its {len(files)} files",
                          "Pass the log file inside it; rank logs are recognised by torchrun's --log-dir layout "
                          "(attempt_N/<rank>/stderr.log), Slurm's slurm-<job>_<task>.out, rank<N> in the file name, "
                          "or a console log whose lines start with [default<N>]: or '<N>: '")
    by_rank: dict[int, list[_File]] = {}
    for f in found:
        by_rank.setdefault(f.rank, []).append(f)
    with ThreadPoolExecutor(max_workers=min(8, len(by_rank))) as pool:
        ranks = list(pool.map(lambda kv: read_rank(*kv), sorted(by_rank.items())))
    # `[rankN]:` prefixes are the global rank when the paths only give local ones (several nodes)
    if len(ranks) > 1 and all(r.global_rank is not None for r in ranks) and len({r.global_rank for r in ranks}) == len(ranks):
        for r in ranks:
            r.rank = r.global_rank
        ranks.sort(key=lambda r: r.rank)
    for r in ranks:
        notes += [f"rank {r.rank}: {n}" for n in r.notes]
    report = _judge(ranks, _root_cause(other), notes, source)
    report.bytes_total = sum(r.bytes for r in ranks)
    return report


_ROOT = re.compile(r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+)", re.S)


def _root_cause(other: list[Path]) -> int | None:
    """torchrun's own summary names the first observed failure; it lives in the launcher's console log."""
    for p in other[:16]:
        try:
            data, _, _ = _read(p)
        except (OSError, TriageError):
            continue
        if m := _ROOT.search(data[-65536:].decode("utf-8", "replace")):
            return int(m[1])
    return None


def _judge(ranks: list[_Rank], root: int | None, notes: list[str], source: str) -> RanksReport:
    summaries = {r.rank: RankSummary(rank=r.rank, role="ok", files=r.files, last_step=r.last_step,
                                     error=r.error.text[:300] if r.error else None, location=r.frame,
                                     error_kind=r.error.kind if r.error else None,
                                     error_time=r.error.time if r.error else None) for r in ranks}
    own = [r for r in ranks if r.error is not None and r.error.victim is None and r.error.kind != "warning"]
    victims = [r for r in ranks if r.error is not None and r.error.victim is not None]
    culprit, basis = None, None
    if own:
        culprit, basis = _first(own)
        if root is not None and any(r.rank == root for r in own):
            culprit, basis = next(r for r in own if r.rank == root), "torchrun's root cause (launcher log)"
    elif root is not None and any(r.rank == root for r in ranks):
        culprit, basis = next(r for r in ranks if r.rank == root), "torchrun's root cause (launcher log)"
    for r in ranks:
        s = summaries[r.rank]
        if culprit is not None and r is culprit:
            s.role, s.why = "culprit", f"failed first with an error of its own ({basis})"
        elif r in own:
            s.role, s.why = "also_failed", "an error of its own, after the culprit's"
        elif r in victims:
            s.role, s.why = "victim", r.error.victim
        elif culprit is not None and (victims or own):
            s.role, s.why = "victim", "no error of its own: stopped by the launcher after the failure"
    odd = _odd_ranks(ranks)
    for rk, why in odd.items():
        if summaries[rk].role in ("ok", "victim") and (culprit is None or rk != culprit.rank):
            summaries[rk].role, summaries[rk].why = "odd", why
    diverging = _diverging(ranks, summaries)
    slow = _straggler(ranks, summaries)
    if slow and summaries[slow[0]].role == "ok":
        summaries[slow[0]].role, summaries[slow[0]].why = "straggler", f"{slow[2]} {slow[1]:.2f}x the median rank's"
    events = [e for r in ranks for _, _, e in r.events]
    stamps = {id(e): t for r in ranks for t, _, e in r.events}
    events.sort(key=lambda e: (stamps[id(e)] is None, stamps[id(e)] or 0, e.rank))
    if len(events) > 200:
        notes.append(f"{len(events)} events; the first 200 by time are listed")
    report = RanksReport(
        source=source, n_ranks=len(ranks), culprit_rank=culprit.rank if culprit else None, culprit_basis=basis,
        victims=[s.rank for s in summaries.values() if s.role == "victim"], odd_ranks=sorted(odd),
        diverging_ranks=diverging, straggler_rank=slow[0] if slow else None,
        straggler_ratio=round(slow[1], 3) if slow else None, straggler_field=slow[2] if slow else None,
        ranks=list(summaries.values()), events=events[:200], notes=notes)
    report.findings = _findings(report, culprit, ranks)
    return report


def _first(own: list[_Rank]) -> tuple[_Rank, str]:
    """The earliest error of its own, on the first time basis every candidate has and that tells them apart."""
    if len(own) == 1:
        return own[0], "the only rank with an error of its own"
    for basis, slack in (("error.json", 1.0), ("order", 0.0), ("log", 0.0), ("mtime", 0.0)):
        ts = [r.error_t.get(basis) for r in own]
        if None in ts:
            continue
        order = sorted(zip(ts, [r.rank for r in own], own))
        if order[1][0] - order[0][0] > slack:
            label = {"error.json": "earliest torchelastic error.json timestamp", "log": "earliest log timestamp",
                     "order": "first error in the shared console log",
                     "mtime": "earliest last write (file mtime)"}[basis]
            return order[0][2], label
    return min(own, key=lambda r: r.rank), "tie: the lowest rank of those that failed at the same time"


_COUNTER = re.compile(r"step|iter|epoch|batch|coll|reduce|gather|broadcast|barrier|sync|seq|calls?$|count", re.I)


def _majority_odd(values: dict[int, float]) -> list[int]:
    """Ranks whose value differs from the value most ranks share (only when a strict majority shares one)."""
    if len(values) < 3:
        return []
    common, n = statistics.mode(values.values()), 0
    n = sum(1 for v in values.values() if v == common)
    if n * 2 <= len(values) or n == len(values):
        return []
    return sorted(rk for rk, v in values.items() if v != common)


def _odd_ranks(ranks: list[_Rank]) -> dict[int, str]:
    """Ranks whose step or collective counters end elsewhere than the majority's: one rank skipped or repeated a
    collective, or got fewer batches (uneven inputs)."""
    out: dict[int, str] = {}
    steps = {r.rank: r.last_step for r in ranks if r.last_step is not None}
    for rk in _majority_odd(steps):
        out[rk] = f"last step {steps[rk]}, most ranks {statistics.mode(steps.values())}"
    keys = {k for r in ranks for k in r.fields if _COUNTER.search(k)}
    for k in sorted(keys):
        last = {r.rank: r.fields[k][-1] for r in ranks if r.fields.get(k)}
        if len(last) * 2 <= len(ranks) or any(v != int(v) for v in last.values()):
            continue
        for rk in _majority_odd(last):
            out.setdefault(rk, f"last {k} {last[rk]:g}, most ranks {statistics.mode(last.values()):g}")
    return out


def _diverging(ranks: list[_Rank], summaries: dict[int, RankSummary]) -> list[int]:
    last = {}
    for r in ranks:
        key = next((k for k in r.fields if logfields.kind(k) == "loss" and not logfields.is_val(k)), None)
        if key:
            last[r.rank] = r.fields[key][-1]
            summaries[r.rank].last_loss = mark_nonfinite(last[r.rank])  # assignment skips the Num validator
    finite = [v for v in last.values() if v == v and abs(v) != float("inf")]
    if len(last) < 2 or not finite:
        return []
    med = statistics.median(finite)
    bad = [rk for rk, v in last.items() if not (v == v and abs(v) != float("inf"))]
    if len(finite) >= 3 and med > 0:
        bad += [rk for rk, v in last.items() if rk not in bad and v > 10 * med]
    return sorted(bad) if len(bad) * 2 < len(last) else []


_WAIT = re.compile(r"wait|comm|sync|idle|allreduce|all_reduce|barrier|collective", re.I)
_SPEED = re.compile(r"/s\b|per_?s|per_?sec|throughput|tps|wps|it_?s$|samples_s|tokens_s|mfu|flops", re.I)


def _straggler(ranks: list[_Rank], summaries: dict[int, RankSummary]) -> tuple[int, float, str] | None:
    """The rank that works longest per step. Synchronous training makes every rank's total step time the
    straggler's, so a busy-time field (compute, forward/backward, data) tells more than the step time, and a
    wait field (comm, sync) points the other way: the straggler waits least."""
    per_key: dict[str, dict[int, float]] = {}
    for r in ranks:
        for k, vals in r.fields.items():
            if logfields.kind(k) == "throughput" and vals:
                per_key.setdefault(k, {})[r.rank] = statistics.median(vals)
        if len(r.step_stamps) >= 3:
            (s0, t0), (s1, t1) = r.step_stamps[0], r.step_stamps[-1]
            if s1 > s0 and t1 > t0:
                per_key.setdefault("wall_s_per_step", {})[r.rank] = (t1 - t0) / (s1 - s0)
    best = None
    for k, vals in per_key.items():
        for rk, v in vals.items():
            summaries[rk].step_time[k] = round(v, 6)
        if len(vals) < 2 or _WAIT.search(k):
            continue
        med = statistics.median(vals.values())
        if med <= 0:
            continue
        if _SPEED.search(k):
            rk = min(vals, key=vals.get)
            ratio = med / vals[rk] if vals[rk] > 0 else float("inf")
        else:
            rk = max(vals, key=vals.get)
            ratio = vals[rk] / med
        if ratio >= STRAGGLER and (best is None or ratio > best[1]):
            best = (rk, ratio, k)
    return best


STRAGGLER = 1.25  # per-step work 25% above the median rank: below that, ordinary jitter between ranks


QUIET_S = 300.0  # no rank wrote for this long: the job is stuck or gone, not between two log lines


def _findings(rep: RanksReport, culprit: _Rank | None, ranks: list[_Rank]) -> list[Finding]:
    src = f"rank logs {rep.source}"
    out: list[Finding] = []
    by = {s.rank: s for s in rep.ranks}
    victims_ev = [Evidence(what=f"victim rank {rk}", value=(by[rk].error or by[rk].why or "")[:160],
                           source=by[rk].files[0] if by[rk].files else src) for rk in rep.victims[:3]]
    if culprit is not None:
        c = by[culprit.rank]
        err = c.error or "no error text (named by torchrun's root cause)"
        mode = crash_mode(err) if c.error else "exception"
        if c.error_kind in ("oom", "killed"):  # a kill with no signal of the launcher's is most often the OOM killer
            mode = "oom"
        if c.error and re.search(r"\bnan\b|\binf\b|non-finite", err, re.I) and mode == "exception":
            mode = "nan_inf"
        ev = [Evidence(what=f"culprit rank {c.rank} error", value=err[:300], source=c.files[0] if c.files else src),
              Evidence(what="how first was decided", value=rep.culprit_basis, source=src)]
        if c.error_time:
            ev.append(Evidence(what="culprit error time", value=c.error_time, source=src))
        ev += victims_ev
        if len(rep.victims) > 3:
            ev.append(Evidence(what="victim ranks", value=_ranks(rep.victims), source=src))
        out.append(Finding(
            failure_mode=mode, confidence=0.9,
            summary=(f"rank {c.rank} failed first: {err[:160]}"
                     + (f"; ranks {_ranks(rep.victims)} are victims (they died of its failure, not their own)"
                        if rep.victims else "")),
            evidence=ev, location=(f"rank {c.rank}: {c.location}" if c.location else f"rank {c.rank}"),
            fix=(crash_fix(err) or f"Fix rank {c.rank}'s error at {c.location or 'its innermost frame'}; "
                 "ignore the victims' timeouts and closed connections, they follow from it")))
    elif rep.odd_ranks and (rep.victims or any(s.error for s in rep.ranks)):
        odd = [by[rk] for rk in rep.odd_ranks]
        out.append(Finding(
            failure_mode="hang", confidence=0.8,
            summary=(f"no rank failed on its own; ranks {_ranks(rep.victims)} timed out in a collective while rank(s) "
                     f"{_ranks(rep.odd_ranks)} ended elsewhere ({odd[0].why})"),
            evidence=[Evidence(what=f"odd rank {s.rank}", value=s.why, source=s.files[0] if s.files else src) for s in odd[:3]]
            + victims_ev,
            location=f"rank {odd[0].rank}" + (f": {odd[0].location}" if odd[0].location else ""),
            fix=(f"Rank {odd[0].rank} issued a different number or order of collectives than the others (a collective "
                 "under a rank- or data-dependent `if`, uneven batches per rank): make every rank call the same "
                 "collectives in the same order (DistributedSampler(drop_last=True), or the Join context manager for "
                 "uneven inputs); TORCH_DISTRIBUTED_DEBUG=DETAIL checks collective consistency")))
    elif rep.odd_ranks:
        quiet = time.time() - max((r.mtime for r in ranks), default=0.0)
        odd = by[rep.odd_ranks[0]]
        out.append(Finding(
            failure_mode="hang", confidence=0.6 if quiet > QUIET_S else 0.3,
            summary=(f"rank(s) {_ranks(rep.odd_ranks)} out of step with the others ({odd.why})"
                     + (f"; no rank has written its log for {quiet:.0f} s" if quiet > QUIET_S else
                        "; the logs are still being written")),
            evidence=[Evidence(what=f"odd rank {s.rank}", value=s.why, source=s.files[0] if s.files else src)
                      for s in (by[rk] for rk in rep.odd_ranks[:3])]
            + [Evidence(what="seconds since the last write of any rank", value=round(quiet, 1), source=src)],
            location=f"rank {odd.rank}",
            fix=(f"If the job is stuck, process_check(pattern='train', stack=True) shows where each rank waits: rank "
                 f"{odd.rank} in a different collective (or none) is the cause; make every rank issue the same "
                 "collectives in the same order")))
    elif rep.victims:
        out.append(Finding(
            failure_mode="hang", confidence=0.6,
            summary=f"ranks {_ranks(rep.victims)} died of collective timeouts, and no rank's log shows a failure of its own",
            evidence=victims_ev,
            fix="The rank that never reached the collective left no error: look for a rank whose log stops earlier or "
                "is missing, re-run with TORCH_FR_BUFFER_SIZE=2000 (flight recorder) and TORCH_NCCL_DUMP_ON_TIMEOUT=1 "
                "to get the mismatched collective, and process_check(stack=True) on a live hang"))
    if rep.diverging_ranks:
        rk = rep.diverging_ranks[0]
        vals = {s.rank: s.last_loss for s in rep.ranks if s.last_loss is not None}
        nonfinite = not is_finite(vals.get(rk))
        out.append(Finding(
            failure_mode="nan_inf" if nonfinite else "data_pipeline", confidence=0.7 if nonfinite else 0.4,
            summary=f"rank(s) {_ranks(rep.diverging_ranks)} report a loss unlike the others' ({vals.get(rk)})",
            evidence=[Evidence(what=f"rank {r} last loss", value=v, source=src) for r, v in list(vals.items())[:6]],
            location=f"rank {rk}",
            fix=(f"The model is the same on every rank (DDP), so rank {rk}'s data differs: dump its batch at the "
                 "last step (its shard of the dataset, its sampler indices) and run nan_hook_run on it")))
    if rep.straggler_rank is not None:
        s = by[rep.straggler_rank]
        med = statistics.median(v.step_time.get(rep.straggler_field, 0) for v in rep.ranks
                                if rep.straggler_field in v.step_time)
        others = {k: v for k, v in s.step_time.items() if k != rep.straggler_field}
        out.append(Finding(
            failure_mode="slow_throughput", confidence=0.7,
            summary=(f"rank {s.rank} is a straggler: {rep.straggler_field} {s.step_time[rep.straggler_field]:.4g} vs "
                     f"median {med:.4g} ({rep.straggler_ratio:.2f}x); every synchronous step waits for it"),
            evidence=[Evidence(what=f"rank {s.rank} median {rep.straggler_field}", value=s.step_time[rep.straggler_field], source=src),
                      Evidence(what=f"median over ranks of {rep.straggler_field}", value=med, source=src),
                      Evidence(what="ratio to median", value=rep.straggler_ratio, source=src)]
            + [Evidence(what=f"rank {s.rank} median {k}", value=v, source=src) for k, v in list(others.items())[:3]],
            location=f"rank {s.rank}",
            fix=(f"Find what rank {s.rank} does that the others do not: its host (a slow or shared node, thermal "
                 "throttling: gpu_status there), its data shard (larger samples, a slow disk), extra work on that rank "
                 "only (logging, evaluation, checkpointing on rank 0)")))
    return out


# --------------------------------------------------------------------------- as tail_log and log_metrics answer


def _focus(rep: RanksReport, root: Path | None) -> tuple[int, Path]:
    """The one file worth showing lines of: the culprit's log, else an odd rank's, the straggler's, the lowest rank's."""
    by = {s.rank: s for s in rep.ranks}
    for rk in [rep.culprit_rank, *rep.odd_ranks, rep.straggler_rank, *rep.diverging_ranks, min(by)]:
        if rk is None:
            continue
        logs_ = [f for f in by[rk].files if not f.endswith("error.json")]
        if logs_:
            paths = [Path(root or "/", f) for f in logs_]
            # the file that holds the error, else the biggest (stderr holds Python's logging and tracebacks)
            best = max(paths, key=lambda p: (p.name == "stderr.log", p.stat().st_size if p.exists() else 0))
            return rk, best
    raise TriageError(f"{rep.source}: the rank set has only error.json files, no log", "Pass the log directory itself")


def tail_ranks(files: list[Path], lines: int, source: str, root: Path | None = None):
    """tail_log over a rank set: the ranks' analysis, with the lines of the rank that matters most."""
    from tools.logs import tail_log

    rep = analyse_ranks(files, source, root)
    rank, path = _focus(rep, root)
    out = tail_log(path, lines)
    out.notes.append(f"lines and events are rank {rank}'s ({rep.ranks[[s.rank for s in rep.ranks].index(rank)].role}); "
                     "`ranks` has every rank, its role and its events")
    out.ranks = rep.model_copy(update={"findings": []})  # they are the answer's own findings: said once
    # the rank analysis says whose error it is; one file's own findings would call a victim's timeout a hang
    if rep.findings:
        out.findings = rep.findings
    return out


def metrics_ranks(files: list[Path], names: list[str] | None, plot: bool, source: str, root: Path | None = None,
                  progress=None, cancelled=None):
    """log_metrics over a rank set: one rank's series in full (the lowest, as rank 0 logs for the job), and every
    rank's last steps from its tail (step counters, losses, per-step times)."""
    from tools.logs import log_metrics

    rep = analyse_ranks(files, source, root)
    lowest = min(s.rank for s in rep.ranks)
    stub = rep.model_copy(update={"culprit_rank": None, "odd_ranks": [], "straggler_rank": None, "diverging_ranks": []})
    _, path = _focus(stub, root)
    out = log_metrics(path, names, plot, progress=progress, cancelled=cancelled)
    out.notes.append(f"series are rank {lowest}'s log ({path.name}); `ranks` compares every rank from its tail")
    out.ranks = rep.model_copy(update={"findings": []})
    out.findings += rep.findings
    return out


def log_source(w: Workspace, spec: str) -> "Path | list[Path]":
    """What a log path names: one log file, a metrics store's run directory (TensorBoard, W&B, MLflow, ...), or the
    rank logs of a distributed run (a directory or a glob), in that order of preference."""
    from tools import stores

    if not is_rank_spec(w, spec):
        return stores.resolve_log(w, spec)
    try:
        path = w.read_path(spec)
        if path.is_dir() and stores.detect(path) is not None:
            return path
    except (TriageError, OSError):
        pass  # not a store: maybe the rank logs of a distributed run
    try:
        files = rank_files(w, spec)
    except TriageError as e:
        raise TriageError(f"{spec} holds no metrics store and no rank logs ({e.what})", e.fix) from e
    if not files:
        raise TriageError(f"{spec} holds no metrics store and no rank logs",
                          "Pass the log file inside it, a run directory (TensorBoard, W&B, MLflow, Lightning, HF "
                          "Trainer, Trackio) or the rank logs of one run")
    return files
