"""Training logs: the tail with typed events (`tail_log`), and metric series with a loss-curve shape (`log_metrics`).

Both read the file themselves and survive what real logs contain: invalid UTF-8, CRLF, tqdm `\\r`
bars, ANSI colours, megabyte lines, files truncated or rotated while being read.
"""

import functools
import json
import math
import os
import re
import sys
import threading
import time
from collections import deque
from itertools import compress
from pathlib import Path
from typing import Callable, Literal

from pydantic import BaseModel, Field, PrivateAttr

from tools import lr_schedule, logfields, stores
from tools.errors import TriageError
from tools.logscan import ANSI as _ANSI, FloatCache, ScanPool, as_str, clean, compile_spec, floats, scan
from tools.logscan import to_float as _float
from tools.failure_modes import crash_fix, crash_mode
from tools.ranks import RanksReport
from tools.report import Evidence, Finding, Num, Report, is_finite

# --------------------------------------------------------------------------- shared text hygiene

# C0 control bytes that never appear in a text log (tab, LF, VT, FF, CR, ESC excluded)
_CTRL = bytes(b for b in range(32) if b not in (9, 10, 11, 12, 13, 27))
_NUL_RUN = re.compile(rb"\x00{16,}")  # a sparse hole left by copytruncate rotation, not binary content


def _looks_binary(sample: bytes) -> bool:
    sample = _NUL_RUN.sub(b"", sample)
    if not sample:
        return False
    bad = len(sample) - len(sample.translate(None, _CTRL))
    return bad / len(sample) > 0.05


def _binary_error(path: Path) -> TriageError:
    return TriageError(f"{path.name} looks like a binary file, not a text log (NUL/control bytes)",
                       "Pass the text log the run writes (stdout/stderr redirect, *.log, *.jsonl, *.csv); "
                       "for a checkpoint use inspect_checkpoint")


def _open_error(path: Path, e: OSError) -> TriageError:
    if isinstance(e, PermissionError):
        return TriageError(f"{path.name} is not readable (permission denied)",
                           "Fix its permissions (chmod o+r) or copy it into the workspace")
    if isinstance(e, IsADirectoryError):
        return TriageError(f"{path.name} is a directory, not a file", "Pass the log file inside it")
    if isinstance(e, FileNotFoundError):
        return TriageError(f"{path} disappeared while being read (rotated or deleted)", "Call the tool again")
    return TriageError(f"cannot read {path.name}: {e.strerror or e}", "Check that the path is a regular text file")


def _clean(raw: bytes) -> str:
    """One physical line -> text: last state of a `\\r` progress bar, no CR, no ANSI, no NULs."""
    if b"\r" in raw:
        parts = [p for p in raw.split(b"\r") if p.strip()]
        raw = parts[-1] if parts else b""
    text = raw.decode("utf-8", "replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text


_MAX_LINE = 4000


def _shorten(text: str, limit: int = _MAX_LINE) -> str:
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} ... [{len(text) - head - tail} chars cut] ... {text[-tail:]}"


# --------------------------------------------------------------------------- tail_log

EventKind = Literal["traceback", "nan_inf", "oom", "nccl", "killed", "segfault", "warning"]


class LogEvent(BaseModel):
    kind: EventKind
    line: int | None = Field(None, description="1-based line number in the file; null when the tail window did not reach the start of the file")
    line_from_end: int = Field(description="1 = the last line of the file")
    text: str
    exception_type: str | None = None
    message: str | None = None
    frame: str | None = Field(None, description="innermost frame of a traceback: file:line in function")
    count: int = Field(1, description="how many times this same event repeats in the window (reported once)")


RunState = Literal["active", "crashed", "stalled", "ended"]
_ACTIVE_S = 120.0  # written this recently: the run is live, no need to look for its process
_HANG_S = 300.0


class Writer(BaseModel):
    pid: int
    status: str = Field(description="running, sleeping, disk-sleep, stopped, ...")
    cmdline: str


class TailLogReport(Report):
    path: str
    size_bytes: int
    lines: list[str]
    first_line_number: int | None = Field(None, description="file line number of lines[0], when known")
    events: list[LogEvent]
    last_step: int | None
    stale_s: float = Field(description="seconds since the file was last written")
    run_state: RunState = Field(
        description="active: written in the last few minutes; crashed: the log ends in a traceback/kill/segfault; "
                    "stalled: not written for a while but a process still has it open for writing (a hang "
                    "candidate); ended: not written for a while and no process on this machine writes it")
    writers: list[Writer] = Field(default_factory=list, description="processes holding the log open for writing (checked when stale)")
    notes: list[str] = Field(default_factory=list)
    ranks: RanksReport | None = Field(None, description="given a directory or glob of rank logs: every rank's role "
                                                        "(culprit, victim, odd, straggler) and events")

    def headline(self) -> str:
        if self.ranks:
            return self.ranks.headline()
        kinds = sorted({e.kind for e in self.events})
        return (f"{self.path}: {len(self.lines)} lines from the end, last step {self.last_step}, "
                f"written {self.stale_s:.0f}s ago, run {self.run_state}; events: {', '.join(kinds) or 'none'}")


_TB_HEAD = re.compile(r"^(?P<prefix>.*?)Traceback \(most recent call last\):\s*$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+))?')
_EXC = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit|Warning|Failure|Fault)|[A-Za-z_][\w.]*\.[A-Z]\w*)(?::\s?(?P<msg>.*))?$")
_KIND_RES: list[tuple[str, re.Pattern]] = [
    ("oom", re.compile(r"out of memory|OutOfMemoryError|\bMemoryError\b|Cannot allocate memory|oom-kill|\bOOM\b", re.I)),
    ("nccl", re.compile(r"^(?=.*nccl)(?=.*(?:error|warn|timeout|timed out|abort|fail))|Watchdog caught collective", re.I)),
    ("segfault", re.compile(r"Segmentation fault|SIGSEGV|SIGBUS|Bus error|core dumped|Fatal Python error|signal 11\b|SIGABRT", re.I)),
    ("killed", re.compile(r"(?:^|\s)Killed\b|SIGKILL|SIGTERM|[Ss]ignal (?:9|15)\b|exit ?code\W{0,3}-?(?:9|137|143)\b")),
    # a NaN value, not a counter's name: Megatron prints "number of nan iterations: 0" on every line
    ("nan_inf", re.compile(r"(?<![\w.])[-+]?(?:nan|inf|infinity)(?![\w])"
                           r"(?!\s+(?:iterations?|iters?|steps?|count|checks?|values?|grads?|detect\w*)\b)"
                           r"|non-finite|not finite", re.I)),
    ("warning", re.compile(r"\w*Warning:|\bWARN(?:ING)?\b|^\[W\d*\s")),
]
_EVENT_HINT = re.compile(r"nan|inf(?!o)|finite|memory|oom|nccl|collective|segment|sigsegv|sigbus|bus error|core dump|"
                         r"fatal|signal|sig(?:abrt|kill|term)|killed|exit ?code|warn|^\[W", re.I)
_STEP_IN_LINE = re.compile(
    r"(?<![\w.])(?:global_step|step|iteration|iter)['\"]?\s*[:= ]\s*(\d+)|(?<![\w.])it\s*[:=]\s*(\d+)|\|\s*(\d+)/\d+\s*\[", re.I)

_BLOCK = 64 * 1024
_MAX_TAIL = 16 * 1024 * 1024
_CONTEXT = 200  # extra lines read above the window so a traceback's header is seen


def _read_tail(fd: int, size: int, want: int) -> tuple[bytes, bool]:
    """The last `want` lines (bounded bytes) by reading backwards; (data, reached start of file)."""
    chunks: list[bytes] = []
    pos, newlines, total = size, 0, 0
    while pos > 0 and newlines <= want and total < _MAX_TAIL:
        n = min(max(_BLOCK, total), pos, _MAX_TAIL - total)
        pos -= n
        chunk = os.pread(fd, n, pos)
        if len(chunk) < n:
            raise _Shrunk()
        chunks.append(chunk)
        newlines += chunk.count(b"\n")
        total += n
    return b"".join(reversed(chunks)), pos == 0


class _Shrunk(Exception):
    """The file got shorter while we read it (truncated in place)."""


def tail_log(path: Path, lines: int = 50) -> TailLogReport:
    """The last `lines` lines of a log and the events in them; reads from the end, cost independent of size."""
    notes: list[str] = []
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise _open_error(path, e) from e
    try:
        for _attempt in range(4):
            st = os.fstat(fd)
            try:
                data, at_start = _read_tail(fd, st.st_size, lines + _CONTEXT)
                break
            except _Shrunk:
                notes.append("the file was truncated while being read; read again from its new end")
        else:
            raise TriageError(f"{path.name} keeps shrinking while being read", "Call tail_log again in a moment")
        try:
            now_st = os.stat(path)
            if (now_st.st_ino, now_st.st_dev) != (st.st_ino, st.st_dev):
                notes.append("the file was rotated while being read: this is the old file's tail; "
                             "call tail_log again for the new one")
        except OSError:
            notes.append("the file was removed while being read: this is its last content")
    except OSError as e:
        raise _open_error(path, e) from e
    finally:
        os.close(fd)

    if _looks_binary(data[-65536:]):
        raise _binary_error(path)
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()  # the final newline ends the last line; it does not start a new one
    if not at_start and len(raw_lines) > 1:
        raw_lines = raw_lines[1:]  # the first one is cut mid-line
    skipped = max(0, len(raw_lines) - lines - _CONTEXT)  # read more than needed: block-sized reads
    raw_lines = raw_lines[skipped:]
    if len(data) >= _MAX_TAIL and len(raw_lines) <= lines:
        notes.append(f"lines are very long: read only the last {_MAX_TAIL >> 20} MB")
    text = [_clean(r) for r in raw_lines]
    window_start = max(0, len(text) - lines)
    first_no = 1 + skipped if at_start else None

    def line_no(i: int) -> int | None:
        return None if first_no is None else first_no + i

    events = _events(text, window_start, line_no)
    last_step = None
    for t in reversed(text[window_start:]):
        m = _STEP_IN_LINE.search(t)
        if m:
            last_step = int(next(g for g in m.groups() if g))
            break
    stale_s = round(max(0.0, time.time() - st.st_mtime), 1)
    writers: list[Writer] = []
    if _ends_in_crash(events):
        state: RunState = "crashed"
    elif stale_s < _ACTIVE_S:
        state = "active"
    else:
        writers, hidden = _writers(st)
        state = "stalled" if writers else "ended"
        if not writers:
            notes.append(f"no process on this machine has the log open for writing: the run ended {stale_s:.0f}s ago"
                         + (f" ({hidden} processes of other users could not be inspected)" if hidden else "")
                         + "; if it runs on another machine, check there")
    report = TailLogReport(
        path=str(path), size_bytes=st.st_size, lines=[_shorten(t) for t in text[window_start:]],
        first_line_number=line_no(window_start), events=events, last_step=last_step,
        stale_s=stale_s, run_state=state, writers=writers, notes=notes,
    )
    report.findings = _tail_findings(report)
    return report


def _ends_in_crash(events: list[LogEvent]) -> bool:
    """The last lines are a traceback, a kill or a native crash."""
    return any(e.kind in ("traceback", "killed", "segfault") and e.line_from_end <= 30 for e in events)


def _writers(st: os.stat_result) -> tuple[list[Writer], int]:
    """Processes with this file (same device and inode, whatever path they opened) open for writing, and how
    many processes could not be inspected. A reader (`tail -f`) is not the run."""
    import psutil

    me, found, hidden = os.getpid(), [], 0
    for pid in psutil.pids():
        if pid == me:
            continue
        try:
            fds = _write_fds_linux(pid, st) if os.path.isdir("/proc/self/fd") else _write_fds_psutil(pid, st)
        except (PermissionError, psutil.AccessDenied):
            hidden += 1
            continue
        except (OSError, psutil.Error):
            continue  # gone meanwhile
        if fds:
            try:
                p = psutil.Process(pid)
                found.append(Writer(pid=pid, status=p.status(), cmdline=" ".join(p.cmdline())[:200]))
            except psutil.Error:
                continue
    return found[:10], hidden


def _write_fds_linux(pid: int, st: os.stat_result) -> list[int]:
    out = []
    base = f"/proc/{pid}/fd"
    for fd in os.listdir(base):
        try:
            t = os.stat(f"{base}/{fd}")
            if (t.st_ino, t.st_dev) != (st.st_ino, st.st_dev):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = next((int(ln.split()[1], 8) for ln in f if ln.startswith("flags:")), 0)
        except OSError:
            continue
        if flags & (os.O_WRONLY | os.O_RDWR):
            out.append(int(fd))
    return out


def _write_fds_psutil(pid: int, st: os.stat_result) -> list[int]:
    import psutil

    out = []
    for f in psutil.Process(pid).open_files():
        try:
            t = os.stat(f.path)
        except OSError:
            continue
        if (t.st_ino, t.st_dev) == (st.st_ino, st.st_dev) and getattr(f, "mode", "w") != "r":
            out.append(f.fd)
    return out


def _events(text: list[str], window_start: int, line_no: Callable[[int], int | None]) -> list[LogEvent]:
    n = len(text)
    found: list[tuple[int, LogEvent]] = []
    in_frames: set[int] = set()
    i = 0
    while i < n:
        head = "Traceback" in text[i] and _TB_HEAD.match(text[i])
        starts_mid = i == 0 and _FRAME.match(text[i])  # the window began inside a traceback
        if not (head or starts_mid):
            i += 1
            continue
        prefix = head.group("prefix") if head else ""
        j, frame = (i + 1 if head else i), None
        while j < n:
            body = text[j][len(prefix):] if prefix and text[j].startswith(prefix) else text[j]
            fm = _FRAME.match(body)
            if fm:
                frame = f"{fm['file']}:{fm['line']} in {(fm['func'] or '?').strip()}"
            if body[:1].isspace() or not body.strip():
                in_frames.add(j)
                j += 1
                continue
            break
        if j < n:
            body = text[j][len(prefix):] if prefix and text[j].startswith(prefix) else text[j]
            em = _EXC.match(body.strip())
            etype = em["type"] if em else body.split(":", 1)[0].strip()[:200]
            msg = (em["msg"] if em else body.split(":", 1)[-1]).strip() if ":" in body else ""
            found.append((j, LogEvent(kind="traceback", line=line_no(j), line_from_end=n - j,
                                      text=_shorten(text[j], 1000), exception_type=etype,
                                      message=_shorten(msg, 1000), frame=frame)))
        in_frames.update(range(i, j))
        i = j + 1 if j > i else i + 1

    for k in range(max(0, window_start - 1), n):
        if k in in_frames:
            continue
        t = _shorten(text[k], 8000)  # keeps every search linear and cheap on megabyte lines
        if not _EVENT_HINT.search(t):
            continue  # one cheap pass rules out most lines
        for kind, rx in _KIND_RES:
            if rx.search(t):
                found.append((k, LogEvent(kind=kind, line=line_no(k), line_from_end=n - k, text=_shorten(t, 1000))))
                break  # one kind per line: the most specific one (order of _KIND_RES)

    # keep events in the window, one per distinct (kind, text), with a repeat count
    merged: dict[tuple[str, str], LogEvent] = {}
    for k, ev in sorted(found, key=lambda x: x[0]):
        if k < window_start:
            continue
        key = (ev.kind, re.sub(r"\d+", "#", ev.text))
        if key in merged:
            ev.count = merged.pop(key).count + 1
        merged[key] = ev
    out = list(merged.values())
    tracebacks = [e for e in out if e.kind == "traceback"]
    rest = [e for e in out if e.kind != "traceback"][-50:]
    return sorted(tracebacks + rest, key=lambda e: -e.line_from_end)


def _tail_findings(r: TailLogReport) -> list[Finding]:
    src = f"tail_log {Path(r.path).name}"
    out: list[Finding] = []
    kinds = {e.kind for e in r.events}
    for e in r.events:
        if e.kind != "traceback":
            continue
        where = f"line {e.line}" if e.line else f"{e.line_from_end} lines from the end"
        ev = [Evidence(what="exception", value=f"{e.exception_type}: {e.message}"[:300], source=f"{src} {where}")]
        if e.frame:
            ev.append(Evidence(what="innermost frame", value=e.frame, source=src))
        low = f"{e.exception_type} {e.message}".lower()
        crash = crash_mode(f"{e.exception_type} {e.message}")
        if crash == "oom":
            mode, fix = "oom", "Reduce the batch size or sequence length, accumulate gradients, or checkpoint activations; check gpu_status for other processes holding memory"
        elif crash == "shape_mismatch":
            mode, fix = "shape_mismatch", "Assert the tensor shapes at the frame named here and fix the producer of the wrong shape"
        elif re.search(r"\bnan\b|\binf\b|non-finite", low):
            mode, fix = "nan_inf", "Run nan_hook_run to find the first op that produces the non-finite value"
        else:
            mode = "exception"
            fix = crash_fix(e.message) or f"Open {e.frame or 'the innermost frame'} and fix the cause of {e.exception_type}"
        out.append(Finding(failure_mode=mode, confidence=0.9, summary=f"the run crashed with {e.exception_type}",
                           evidence=ev, fix=fix, location=e.frame))
    tb_modes = {f.failure_mode for f in out}

    def first(kind: str) -> LogEvent:
        return next(e for e in reversed(r.events) if e.kind == kind)

    if "oom" in kinds and "oom" not in tb_modes:
        e = first("oom")
        out.append(Finding(failure_mode="oom", confidence=0.8, summary="the log reports running out of memory",
                           evidence=[Evidence(what="log line", value=e.text[:300], source=src)],
                           fix="Reduce batch size / sequence length, accumulate gradients, checkpoint activations; check gpu_status"))
    if "nan_inf" in kinds and "nan_inf" not in tb_modes:
        e = first("nan_inf")
        out.append(Finding(failure_mode="nan_inf", confidence=0.6, summary="a NaN/Inf value appears in the log",
                           evidence=[Evidence(what="log line", value=e.text[:300], source=src)],
                           fix="log_metrics gives the first non-finite step; nan_hook_run finds the op"))
    if "nccl" in kinds:
        e = first("nccl")
        out.append(Finding(failure_mode="hang", confidence=0.6, summary="NCCL reports an error or a collective timeout",
                           evidence=[Evidence(what="log line", value=e.text[:300], source=src)],
                           fix="Find the rank that stopped first (its own log / process_check stack=True); set TORCH_NCCL_ASYNC_ERROR_HANDLING=1 and NCCL_DEBUG=INFO"))
    if "killed" in kinds:
        e = first("killed")
        out.append(Finding(failure_mode="oom", confidence=0.4, summary="the process was killed by a signal; on Linux this is often the host OOM killer",
                           evidence=[Evidence(what="log line", value=e.text[:300], source=src)],
                           fix="Check `dmesg | grep -i oom` / the scheduler's memory limit; lower host memory use (DataLoader workers, pinned memory, dataset in RAM)"))
    if "segfault" in kinds:
        e = first("segfault")
        out.append(Finding(failure_mode="exception", confidence=0.6, summary="the process crashed in native code",
                           evidence=[Evidence(what="log line", value=e.text[:300], source=src)],
                           fix="Rerun with PYTHONFAULTHANDLER=1 (and CUDA_LAUNCH_BLOCKING=1 on GPU) to get the Python stack of the crash"))
    # A quiet log is a hang only while its process is alive to write it; a log nobody writes is a run that ended.
    if not out and r.run_state == "stalled" and r.stale_s > _HANG_S:
        w = r.writers[0]
        stopped = w.status == "stopped"
        out.append(Finding(
            failure_mode="hang", confidence=0.4 if stopped else 0.6,
            summary=(f"pid {w.pid} still has the log open for writing but wrote nothing for {r.stale_s:.0f}s "
                     f"(last step {r.last_step})" + (" and is stopped (SIGSTOP / Ctrl-Z)" if stopped else "")),
            evidence=[Evidence(what="seconds since the log was written", value=r.stale_s, source=src),
                      Evidence(what="last step in the log", value=r.last_step, source=src),
                      Evidence(what="writer", value=f"pid {w.pid} ({w.status}): {w.cmdline[:120]}", source="/proc/<pid>/fdinfo")],
            fix=(f"kill -CONT {w.pid} if it was stopped by mistake" if stopped else
                 f"process_check(pid={w.pid}, stack=True): the stack shows where it waits (DataLoader queue, lock, NCCL "
                 "collective); a long silent phase (evaluation, checkpoint save) is not a hang"),
            location=f"pid {w.pid}"))
    return out


# --------------------------------------------------------------------------- log_metrics: parsing

_NUM = logfields.NUM
_IDENT = re.compile(r"[A-Za-z_][\w./\-]*\Z")
_NUMERIC = re.compile(r"(?:" + _NUM + r")?\Z")
_HAS_NUM = re.compile(r"\d|nan|inf", re.I)
_LIT_TOKENS = re.compile(r"(\s+)")
_VAL = r"(\S+)"  # float() validates; backtracking gives back a trailing comma or brace
# Possessive where giving characters back can never help (whitespace or the line's end comes next):
# the same matches, without the regex engine trying every shorter one first. Python >= 3.11.
_PLUS = "++" if sys.version_info >= (3, 11) else "+"
_CELL = r"([^,\t|\n]*)"
_CLOCK = re.compile(r"\d+:\d\d(?::\d\d)?\Z")  # a table's wall-time cell (fastai's `00:02`): not a series
_MAX_SERIES = 200
_MAX_TEMPLATES = 8
_MAX_HELD = 5000


def _generalize(lit: str, at_end: bool, after_value: bool = False) -> str:
    """Literal text between values -> a regex: timestamps and other numbers vary, whitespace width varies.

    Coarse on purpose: `\\S+` and ` +` keep the template regex fast (see benchmarks/bench_evidence.py).
    `at_end`: the line ends after `lit` (otherwise a value follows it). `after_value`: `lit` follows a value
    directly, so its first characters stay literal (`step 5/400:` must not read the value as `5/400`).
    """
    out = []
    toks = [t for t in _LIT_TOKENS.split(lit) if t]
    for i, tok in enumerate(toks):
        possessive = at_end or i < len(toks) - 1
        if tok.isspace():
            out.append((" " if tok == " " else r"[ \t]") + _PLUS)
        elif any(c.isdigit() for c in tok) and not _IDENT.match(tok):
            head = re.match(r"\D*", tok).group() if i == 0 and after_value else ""
            if head:
                out.append(re.escape(head) + r"\S*" + ("+" if possessive and _PLUS == "++" else ""))
            else:
                out.append(r"\S" + (_PLUS if possessive else "+"))
        else:
            out.append(re.escape(tok))
    return "".join(out)


def _value_rx(after: str, at_end: bool) -> str:
    """The group of one value, given the literal text `after` it."""
    return r"(\S" + _PLUS + ")" if after[:1].isspace() or at_end and not after else _VAL


class _Template:
    def __init__(self, source: str, keys: list[str], dense: bool = False):
        self.source, self.keys = source, keys
        self.dense = dense  # key/value groups are never empty (CSV cells can be)
        self.step = logfields.step_index([(k, "") for k in keys])


class _Parser:
    """Turns lines into (key, value string, step) records; learns one regex template per line shape.

    The hot path is a single `re.split` over an 8 MB chunk with the learned templates (C speed);
    lines no template matches go through the general per-line parser, which learns new templates.
    """

    def __init__(self, wanted: Callable[[str], bool], sink: Callable[[str, list, list], None]):
        self.wanted, self.sink = wanted, sink
        self.late_sink = sink  # the lines held back to the end; log_metrics places them by step
        self.templates: list[_Template] = []
        self.rx: re.Pattern | None = None
        self.shape_seen: dict[str, int] = {}
        self.table: tuple[str, list[str]] | None = None
        self.carry: object | None = None  # last explicit step value seen
        self.step_keys: dict[str, int] = {}  # which key gave the step, how often
        self.ordinal = 0  # metric records so far (the step when the log has none)
        self.dirty = False
        self.offsets: list[int] = []
        self.stride = 1
        self.spec: tuple = ()
        self.rx_bytes: re.Pattern | None = None
        self.caches: dict = {}  # float conversion caches of the template columns
        # A series is a line shape the log repeats. The values of a shape seen once so far wait here:
        # headers and config dumps (`vocab size 32`, `learning_rate = 6e-4`) never repeat.
        # {shape: (pairs, step index, step, whether the line had a step of its own or after one)}
        self.held: dict[str, tuple[list[tuple[str, str]], int | None, object, bool]] = {}
        self.repeated: set[str] = set()
        self.emitted: set[str] = set()  # keys of the lines emitted as they came (not held back)

    # -- general per-line parser (slow path)
    def _parse_line(self, line: str) -> tuple[list[tuple[str, str]], int | None, str | None]:
        """pairs, index of the step pair, and the line's template source (or None)."""
        s = line.strip()
        if not s or not _HAS_NUM.search(s):
            if s:
                self._maybe_header(s)
            return [], None, None
        if self.table:
            delim, keys = self.table
            cells = self._cells(s, delim)
            if len(cells) == len(keys) and all(_NUMERIC.match(c.strip()) or _CLOCK.match(c.strip()) for c in cells):
                pairs = [(k, c.strip()) for k, c in zip(keys, cells) if c.strip() and not _CLOCK.match(c.strip())]
                src = "[ \\t]*" + re.escape(delim).join([_CELL] * len(keys)) + "[ \\t]*" if delim not in "| " else None
                return pairs, self._step_index(pairs), (f"T{delim}" + src) if src else None
        found, step, templatable = logfields.fields(line)
        if not found:
            self._maybe_header(s)
            return [], None, None
        pairs = [(f.key, f.value) for f in found]
        if not templatable:
            return pairs, step, None  # a step computed from the line (tqdm bars, timm): no template
        out, pos = [], 0
        for i, f in enumerate(found):
            nxt = found[i + 1].start if i + 1 < len(found) else None
            out += [_generalize(line[pos:f.start], False, after_value=i > 0), _value_rx(line[f.end:nxt], nxt is None)]
            if f.unit_end > f.end:  # `41.2ms`: the unit is literal, or `\S+` after the value would take it
                out.append(re.escape(line[f.end:f.unit_end]))
            pos = f.unit_end
        out.append(_generalize(line[pos:], True, after_value=bool(found)))
        return pairs, step, "K" + "".join(out)

    @staticmethod
    def _cells(s: str, delim: str) -> list[str]:
        cells = s.split() if delim == " " else s.split(delim)
        if delim == "|":
            cells = [c for c in cells if c.strip()]
        return cells

    def _maybe_header(self, s: str) -> None:
        for delim in (",", "\t", "|"):
            if delim in s:
                cells = [c.strip().strip("\"'") for c in self._cells(s, delim)]
                if len(cells) >= 2 and all(_IDENT.match(c) for c in cells):
                    self.table = (delim, cells)
                return
        # fastai's table: `epoch  train_loss  valid_loss  accuracy  time`, cells apart by spaces; only a header
        # that starts with a step column and names a loss, not any line of words
        cells = s.split()
        if len(cells) >= 3 and all(_IDENT.match(c) for c in cells) and cells[0].lower() in ("epoch", "step", "iter") \
                and any("loss" in c.lower() for c in cells):
            self.table = (" ", cells)

    @staticmethod
    def _step_index(pairs: list[tuple[str, str]]) -> int | None:
        return logfields.step_index(pairs)

    def finish(self) -> None:
        """At the end of the log: a line seen once is a series point only when it reports a loss at a step
        (a single evaluation, HF's end-of-training summary); the rest were headers and settings."""
        out: dict[str, tuple[list, list]] = {}
        # a line without a step of its own after the curve (`best checkpoint: val_loss=...`, `constant predictor:
        # val_loss=...`) restates or benchmarks a series the log repeats: it is no point of that series
        curves = {k for t in self.templates for k in t.keys} | self.emitted
        for src, (pairs, step_i, step, stepped) in list(self.held.items()):
            if step_i is None:
                pairs = [(k, v) for k, v in pairs if k not in curves]
            if stepped and any(logfields.kind(k) == "loss" for k, _ in pairs):
                del self.held[src]
                self._emit(pairs, step_i, step, out)
        for key, (steps, vals) in out.items():
            self.late_sink(key, steps, vals)

    def config_values(self) -> dict[str, str]:
        """`key -> value` as the log's header or config dump states it (lines seen once: call after `finish`);
        the last statement wins (nanoGPT prints its config file, then `Overriding: learning_rate = ...`)."""
        out: dict[str, str] = {}
        for pairs, step_i, _s, _st in self.held.values():
            for i, (k, v) in enumerate(pairs):
                if i != step_i:
                    out[k] = v
        return out

    def _learn(self, src: str, pairs: list[tuple[str, str]]) -> None:
        if len(self.templates) >= _MAX_TEMPLATES or len(pairs) > 40:
            return
        n = self.shape_seen.get(src, 0) + 1
        self.shape_seen[src] = n
        if n == 2:  # a shape seen twice is a shape the log repeats
            body = src[1:] if src[0] == "K" else src[2:]
            self.templates.append(_Template(body, [k for k, _ in pairs] if src[0] == "K" else self.table[1], src[0] == "K"))
            self.dirty = True

    def _record(self, pairs: list[tuple[str, str]], step_i: int | None, out: dict, src: str | None = None) -> None:
        """One line's values at its step; `src`, its shape: held back the first time it is seen."""
        self.ordinal += 1
        if step_i is not None and pairs[step_i][0].lower() == "epoch" and self.carry is not None \
                and any(k.lower() != "epoch" for k in self.step_keys):
            # an epoch summary line in a log that counts steps: it belongs at the last step seen, so its
            # values line up with the step lines around it (a NaN at "epoch 9 done" is after step 800, not at 9)
            step_i = None
        stepped = step_i is not None or self.carry is not None
        if step_i is not None:
            self.carry = step = pairs[step_i][1]
            k = pairs[step_i][0]
            self.step_keys[k] = self.step_keys.get(k, 0) + 1
        else:
            step = self.carry if self.carry is not None else self.ordinal
        if src is not None and src not in self.repeated:
            held = self.held.pop(src, None)
            if held is None and len(self.held) < _MAX_HELD:
                self.held[src] = (pairs, step_i, step, stepped)
                return
            self.repeated.add(src)
            if held is not None:
                self._emit(*held[:3], out)
        self._emit(pairs, step_i, step, out)

    def _emit(self, pairs: list[tuple[str, str]], step_i: int | None, step, out: dict) -> None:
        for i, (k, v) in enumerate(pairs):
            self.emitted.add(k)
            if i != step_i and self.wanted(k):
                buf = out.get(k)
                if buf is None:
                    buf = out[k] = ([], [])
                buf[0].append(step)
                buf[1].append(v)

    def _slow_lines(self, text: str, out: dict, stop_on_learn: bool = False) -> str:
        """Parse line by line; with `stop_on_learn`, return the unparsed rest as soon as a template is learnt."""
        pos, n = 0, len(text)
        while pos < n:
            nl = text.find("\n", pos)
            end = n if nl < 0 else nl
            line = text[pos:end]
            pos = end + 1
            if not line:
                continue
            pairs, step_i, src = self._parse_line(line)
            if pairs:
                self._record(pairs, step_i, out, src)
                if src:
                    self._learn(src, pairs)
                    if stop_on_learn and self.dirty:
                        return text[pos:]
        return ""

    def _compile(self) -> None:
        pattern = "(?m)^(?:" + "|".join(f"(?:{t.source})" for t in self.templates) + ")$"
        self.rx = re.compile(pattern)
        self.offsets, o = [], 1
        for t in self.templates:
            self.offsets.append(o)
            o += len(t.keys)
        self.stride = o
        self.dirty = False
        self.spec = (pattern, tuple((tuple(t.keys), t.step, tuple(map(self.wanted, t.keys)), t.dense)
                                    for t in self.templates))
        self.rx_bytes = None

    def spec_now(self) -> tuple | None:
        """What a worker needs to scan the next chunk as `feed` will (None: no templates, or not in columns)."""
        if self.dirty:
            self._compile()  # as the next feed would, before it reads a line
        if self.rx is None or any(t.step is None for t in self.templates):
            return None  # line-order steps run through the chunks: only the ordered walk is exact
        return self.spec

    # -- one chunk of whole lines
    def feed(self, text: bytes | str | Callable[[], bytes | str], scanned: dict | None = None) -> None:
        """`text`: whole lines (str, or ASCII bytes from `clean`), or a function that reads them once (a chunk
        a worker has `scanned` is read here only when that scan no longer holds)."""
        out: dict[str, tuple[list, list]] = {}
        while text:
            if self.dirty:
                self._compile()
            if self.rx is None:
                text = self._slow_lines(_text(text), out, stop_on_learn=True)
                continue
            if not self._fast(text, out, scanned):
                flat = self.rx.split(_text(text))
                self._rows(flat, self.stride, flat[0::self.stride], out)
            text = ""
        for key, (steps, vals) in out.items():
            self.sink(key, steps, vals)

    def scan_ahead(self, text: Callable[[], bytes | str]) -> dict:
        """A scan of a later chunk with the templates as they are now (`feed` checks they still are then)."""
        return self._scan(_load(text))

    def _scan(self, text: bytes | str) -> dict:
        if isinstance(text, bytes):
            self.rx_bytes = self.rx_bytes or compile_spec(self.spec[0], text)
        return scan(text, self.rx_bytes if isinstance(text, bytes) else self.rx, self.spec[1], self.caches)

    def _fast(self, text, out: dict, scanned: dict | None) -> bool:
        """Columns for the template rows, the per-line parser for the few other lines.

        Returns False (state untouched) when the order of rows matters, so the caller walks them in order.
        """
        all_steps = all(t.step is not None for t in self.templates)
        if not (all_steps or len(self.templates) == 1 and self.carry is None):
            return False
        if scanned is None or scanned["n"] != len(self.offsets):  # a worker's scan holds for the templates it had
            scanned = self._scan(_load(text))
        odd = scanned["odd"]
        if odd and not all_steps:
            return False  # line-order steps across shapes: only the ordered walk is exact
        saved = (self.carry, self.ordinal, dict(self.step_keys), dict(self.held), set(self.repeated), set(self.emitted))
        cols: dict[str, tuple[list, list]] = {}
        self._columns(scanned, cols)
        side: dict[str, tuple[list, list]] = {}
        for k, gap, step_above in odd:
            # a line without a step takes the step of the row above it (above the chunk's first row: the
            # step carried into the chunk, not the chunk's last one that `_columns` left)
            self.carry = step_above if k else saved[0]
            self._slow_lines(gap, side)
        nrows = scanned["nrows"]
        if nrows and all_steps and (not odd or odd[-1][0] != nrows):
            self.carry = scanned["last"]
        if not (side.keys() & cols.keys() or side.keys() & out.keys() or cols.keys() & out.keys()):
            out.update(side)
            out.update(cols)
            return True
        # one series fed by both kinds of lines, or line-order steps across shapes: only the ordered walk is exact
        self.carry, self.ordinal, self.step_keys, self.held, self.repeated, self.emitted = saved
        return False

    def _columns(self, scanned: dict, out: dict) -> None:
        """Fast path: every metric line matched a template that carries its step; series are its columns."""
        for t, rows, steps, tcols in zip(self.templates, scanned["rows"], scanned["steps"], scanned["vals"]):
            if not rows:
                continue
            if t.step is not None:
                self.carry = as_str(steps[-1])
                k = t.keys[t.step]
                self.step_keys[k] = self.step_keys.get(k, 0) + rows
            else:
                steps = range(self.ordinal + 1, self.ordinal + 1 + rows)
            self.ordinal += rows
            for j, fv, keep in tcols:
                key = t.keys[j]
                st, fv = (steps, fv) if keep is None else (list(compress(steps, keep)), list(compress(fv, keep)))
                buf = out.get(key)
                out[key] = (st, fv) if buf is None else ([*buf[0], *st], [*buf[1], *fv])

    def _rows(self, flat: list, stride: int, gaps: list, out: dict) -> None:
        """Mixed chunk: walk the rows in order so steps carry over between line shapes."""
        for r, gap in enumerate(gaps):
            if gap and gap != "\n":
                self._slow_lines(gap, out)
            if r == len(gaps) - 1:
                break
            base = r * stride
            for t, off in zip(self.templates, self.offsets):
                vals = flat[base + off: base + off + len(t.keys)]
                if vals[0] is not None:
                    pairs = [(k, v) for k, v in zip(t.keys, vals) if v]
                    step_i = None
                    if t.step is not None and vals[t.step]:
                        step_i = [k for k, _ in pairs].index(t.keys[t.step])
                    self._record(pairs, step_i, out)
                    break


def _load(text) -> bytes | str:
    return text() if callable(text) else text


def _text(text) -> str:
    return as_str(_load(text))


# --------------------------------------------------------------------------- log_metrics: statistics

_MAX_BUCKETS = 1000
_TAIL = 256
_INF = math.inf


def _step_out(x) -> float | int | None:
    f = _float(x)
    if not math.isfinite(f):
        return None
    return int(f) if f.is_integer() else f


class _Series:
    """Streaming statistics of one metric, with a bounded bucketed curve (mean/min/max per bucket)."""

    def __init__(self, name: str):
        self.name = name
        self.count = self.nonfinite = 0
        self.first = self.last = None
        self.first_step = self.last_step = self.first_nonfinite_step = None
        self.lo, self.hi = _INF, -_INF
        self.bucket = 1
        self.b_step: list[float] = []
        self.b_sum: list[float] = []
        self.b_min: list[float] = []
        self.b_max: list[float] = []
        self.b_n: list[int] = []
        self.tail: deque[float] = deque(maxlen=_TAIL)
        self.cache = FloatCache()

    def add(self, steps, vals: list[str]) -> None:
        fv = floats(vals, self.cache)
        if "" in vals:  # empty CSV cells are missing values, not NaN
            keep = [v != "" for v in vals]
            fv, steps = list(compress(fv, keep)), list(compress(steps, keep))
        self.add_floats(steps, fv)

    def add_floats(self, steps, fv: list[float]) -> None:
        if not fv:
            return
        if self.count == 0:
            self.first, self.first_step = fv[0], steps[0]
        self.count += len(fv)
        self.last, self.last_step = fv[-1], steps[-1]
        total = sum(fv)
        if not math.isfinite(total):
            fin = list(map(math.isfinite, fv))
            bad = len(fv) - sum(fin)
            if bad:
                if self.nonfinite == 0:
                    self.first_nonfinite_step = steps[fin.index(False)]
                self.nonfinite += bad
                fv, steps = list(compress(fv, fin)), list(compress(steps, fin))
                if not fv:
                    return
        self.tail.extend(fv[-_TAIL:])
        lo, hi = self._bucketize(steps, fv)
        self.lo = min(self.lo, lo)
        self.hi = max(self.hi, hi)

    def insert(self, step, value: str) -> None:
        """One point the log printed once (held back to the end: `step 0 | val_mse 1.09` before training) at its
        place by step, so the series' first and last values stay where the curve starts and ends."""
        v, at = _float(value), _float(step)
        if not self.count or not (math.isfinite(v) and math.isfinite(at)) or at >= _float(self.last_step):
            self.add([step], [value])
            return
        k = next((i for i, s in enumerate(self.b_step) if s > at), len(self.b_step))
        for col, x in ((self.b_step, at), (self.b_sum, v), (self.b_min, v), (self.b_max, v), (self.b_n, 1)):
            col.insert(k, x)
        if at < _float(self.first_step):
            self.first, self.first_step = v, step
        self.count += 1
        self.lo, self.hi = min(self.lo, v), max(self.hi, v)

    def _bucketize(self, steps, fv: list[float]) -> tuple[float, float]:
        """Fold `fv` into the buckets; its min and max, from the buckets' (one pass over the values fewer)."""
        n, i, b = len(fv), 0, self.bucket
        los, his = [], []
        if self.b_n and self.b_n[-1] < b:  # top up the open bucket
            take = min(b - self.b_n[-1], n)
            part = fv[:take]
            los.append(min(part))
            his.append(max(part))
            self.b_sum[-1] += sum(part)
            self.b_min[-1] = min(self.b_min[-1], los[-1])
            self.b_max[-1] = max(self.b_max[-1], his[-1])
            self.b_n[-1] += take
            i = take
        while len(self.b_n) + (n - i) / b > 2 * _MAX_BUCKETS:
            self._halve()
            b = self.bucket
        starts = range(i, n, b)
        parts = [fv[k:k + b] for k in starts]  # whole columns of buckets at a time: early on there are many
        mins, maxs = list(map(min, parts)), list(map(max, parts))
        self.b_step += [_float(steps[k]) for k in starts]
        self.b_sum += map(sum, parts)
        self.b_min += mins
        self.b_max += maxs
        self.b_n += map(len, parts)
        los += mins
        his += maxs
        return min(los), max(his)

    def _halve(self) -> None:
        m = len(self.b_n) // 2 * 2
        tail = [(self.b_step[k], self.b_sum[k], self.b_min[k], self.b_max[k], self.b_n[k]) for k in range(m, len(self.b_n))]
        self.b_step = self.b_step[0:m:2]
        self.b_sum = [self.b_sum[k] + self.b_sum[k + 1] for k in range(0, m, 2)]
        self.b_min = [min(self.b_min[k], self.b_min[k + 1]) for k in range(0, m, 2)]
        self.b_max = [max(self.b_max[k], self.b_max[k + 1]) for k in range(0, m, 2)]
        self.b_n = [self.b_n[k] + self.b_n[k + 1] for k in range(0, m, 2)]
        for s, su, lo, hi, n in tail:
            self.b_step.append(s), self.b_sum.append(su), self.b_min.append(lo), self.b_max.append(hi), self.b_n.append(n)
        self.bucket *= 2

    def curve(self) -> tuple[list[float], list[float]]:
        """(steps, bucket means) of the finite values; at most ~2000 points."""
        return self.b_step, [s / n for s, n in zip(self.b_sum, self.b_n)]

    def ema(self, weight: float = 0.9) -> float | None:
        # The window (1/(1-weight) points) shrinks to a fifth of a short series, and the start is zero with
        # Adam's bias correction: seeded with its first value, a 10-point per-epoch VAE series 314.8 -> 156.9
        # read as "ended at 229.9", and a healthy run that fell by a third looked stalled.
        if not self.tail:
            return None
        weight = min(weight, 1 - 1 / max(1.0, len(self.tail) / 5))
        v = 0.0
        for x in self.tail:
            v = weight * v + (1 - weight) * x
        return v / (1 - weight ** len(self.tail))


Trend = Literal["decreasing", "increasing", "flat", "unknown"]
Shape = Literal["decreasing", "converged", "plateau", "slow_burn", "hockey_stick", "oscillating", "spike_and_recover",
                "nan_death", "spike_then_nan", "diverging", "train_val_divergence", "too_short", "unclear"]


_SHOWN = 8


class SeriesStats(BaseModel):
    name: str
    kind: logfields.Kind = Field(description="loss, lr, grad_norm, throughput (time/speed/MFU), memory or metric")
    count: int
    first: Num
    last: Num
    min: Num
    max: Num
    nonfinite: int = Field(description="how many values were NaN or Inf")
    first_nonfinite_step: float | int | None
    first_step: float | int | None
    last_step: float | int | None
    smoothed_last: Num = Field(description="EMA of the last finite values (window 10 points, or a fifth of a shorter series)")
    trend: Trend = Field(description="over the last part of the run, relative to the part before")


class LogMetricsReport(Report):
    path: str
    bytes_read: int
    step_source: str = Field(description="which key gave the step ('step', 'epoch', ...) or 'line order'")
    series: list[SeriesStats] = Field(description="the training loss, validation, lr and grad norm first; "
                                                  f"at most {_SHOWN} unless `names` asks for more")
    other_series: list[str] = Field(default_factory=list, description="further series found (ask for them with `names`)")
    loss_series: str | None = Field(None, description="the series classified as the training loss")
    val_series: str | None = None
    shape: Shape | None = Field(None, description="classified shape of the training loss curve")
    not_found: list[str] = Field(default_factory=list, description="requested names no line carried")
    format: str = Field("text", description="where the series came from: text (a log, JSON lines, CSV), tensorboard, "
                                            "wandb, mlflow, lightning_csv, hf_trainer or trackio")
    run: str | None = Field(None, description="the run read inside a store (others are listed in notes)")
    params: dict[str, str] = Field(default_factory=dict, description="the run's config as the store keeps it (W&B "
                                                                     "config, MLflow params, hparams.yaml), first 30")
    notes: list[str] = Field(default_factory=list)
    ranks: RanksReport | None = Field(None, description="given a directory or glob of rank logs: per-rank last step, "
                                                        "loss and step times, odd and straggler ranks")
    _png: bytes | None = PrivateAttr(default=None)

    @property
    def png(self) -> bytes | None:
        return self._png

    def headline(self) -> str:
        if not self.series:
            return f"{self.path}: no metric series found"
        s = next((x for x in self.series if x.name == self.loss_series), self.series[0])
        where = self.path if self.format == "text" else f"{self.path} ({self.format} run {self.run})"
        return (f"{where}: {len(self.series)} series; {s.name} {s.first} -> {s.last} "
                f"(min {s.min}, {s.nonfinite} non-finite) over {s.count} points; shape: {self.shape}")


def _sig(x: float | None, digits: int = 4) -> float | None:
    return x if x is None or not math.isfinite(x) or x == 0 else float(f"{x:.{digits}g}")


_READ_FIRST = 64 << 10
_READ = 8 << 20
_PARALLEL_MIN = 16 << 20  # smaller logs parse in-process: starting workers would cost more than they save
_MAX_WORKERS = 3  # each holds ~50 MB while it scans a chunk: with the caller, ~250 MB at most
_AHEAD = 3  # chunks queued per worker, so none waits while the caller folds in a result
_STEAL = 2  # chunks further ahead that the caller scans itself rather than wait for a worker
_POOL_SLOT = threading.Semaphore(1)  # one parallel parse at a time; concurrent calls parse in-process


def log_metrics(path: Path, names: list[str] | None = None, plot: bool = False,
                progress: Callable[[int, int], None] | None = None,
                cancelled: Callable[[], bool] | None = None, run: str | None = None) -> LogMetricsReport:
    """Parse every metric series in a log (streaming, bounded memory, a big log on every core) or a metrics store
    (a run directory or file of TensorBoard, W&B, MLflow, Lightning, HF Trainer, Trackio: tools/stores.py) and
    classify the loss curve."""
    want = {n.lower() for n in names} if names else None
    series: dict[str, _Series] = {}
    notes: list[str] = []
    store = stores.detect(path, run)  # None: a text log (a directory without a store is refused there)

    def wanted(key: str) -> bool:
        return want is None or key.lower() in want or logfields.untagged(key).lower() in want

    def sink(key: str, steps, vals) -> None:
        s = series.get(key)
        if s is None:
            if len(series) >= _MAX_SERIES:
                return
            s = series[key] = _Series(key)
        if vals and type(vals[0]) is float:  # a template column, converted already
            s.add_floats(steps, vals)
        else:
            s.add(steps, vals)

    if store is not None:
        return _store_metrics(store, series, want, names, notes, plot, sink, wanted, cancelled)
    def late_sink(key: str, steps, vals) -> None:
        s = series.get(key)
        if s is None:
            sink(key, steps, vals)
            return
        for step, v in zip(steps, vals):
            s.insert(step, v)

    parser = _Parser(wanted, sink)
    parser.late_sink = late_sink
    try:
        f = open(path, "rb")
    except OSError as e:
        raise _open_error(path, e) from e
    with f:
        size = os.fstat(f.fileno()).st_size
        head = f.read(65536)
        if _looks_binary(head):
            raise _binary_error(path)
        f.seek(0)
        last_report = time.monotonic()

        def tick(done: int) -> None:
            nonlocal last_report
            if cancelled and cancelled():
                raise TriageError("log_metrics was cancelled", "")
            if progress and time.monotonic() - last_report > 0.5:
                progress(done, size)
                last_report = time.monotonic()

        try:
            done = feed_file(f, size, parser, tick)
            parser.finish()
        except OSError as e:
            raise _open_error(path, e) from e
    _drop_lone_tags(series)
    step_source = max(parser.step_keys, key=parser.step_keys.get) if parser.step_keys else "line order"
    report = _summarise(path, done, series, want, names, step_source, parser.config_values(), notes)
    if plot and report.series:
        _plot(report, series, want, Path(path).name)
    return report


def _drop_lone_tags(series: dict[str, "_Series"]) -> None:
    """A phase tag names a series apart only beside the untagged one (`pretrain:loss` before the fine-tune's
    `loss`); a tag on every line (torchtitan's `[titan]`), the only one its key has, is dropped."""
    for plain in {logfields.untagged(k) for k in series}:
        key = logfields.lone_tag(plain, list(series))
        if key is not None:
            s = series.pop(key)
            s.name = plain
            series[plain] = s


def _store_metrics(store: "stores.Store", series: dict, want, names, notes: list[str], plot: bool, sink, wanted,
                   cancelled) -> LogMetricsReport:
    """log_metrics over a store's series: the same statistics, shapes and findings as for a text log."""
    def tick() -> None:
        if cancelled and cancelled():
            raise TriageError("log_metrics was cancelled", "")

    for key, steps, vals in stores.read(store, wanted, tick):
        sink(key, steps, vals)
    config = stores.params(store)
    done = sum(os.stat(f).st_size for f in store.files)
    report = _summarise(store.path, done, series, want, names, "step", config, [*store.notes, *notes])
    report.format, report.run = store.format, store.run
    report.params = dict(list(config.items())[:30])
    if plot and report.series:
        _plot(report, series, want, f"{store.path.name} ({store.format})")
    return report


def _plot(report: LogMetricsReport, series: dict, want, title: str) -> None:
    from tools.plot import metric_curves_png
    chosen = [s for s in series.values() if want is None or s.name.lower() in want]
    loss = series.get(report.loss_series) if report.loss_series else None
    val = series.get(report.val_series) if report.val_series else None
    lr = next((s for s in series.values() if _is_lr(s.name)), None)
    report._png = metric_curves_png(
        [(s.name, *s.curve()) for s in ([loss, val] if loss else chosen[:4]) if s],
        (lr.name, *lr.curve()) if lr else None, title=title)


_MAX_JSON_DOC = 256 << 20


def json_records(f, size: int) -> list[dict] | None:
    """The records of a log that is one JSON document rather than lines: HF Trainer's `trainer_state.json`
    (`log_history`), or a JSON list of records. None for anything else (JSON lines included)."""
    head = f.read(65536)
    f.seek(0)
    first = head.lstrip()[:1]
    if first not in (b"{", b"[") or size > _MAX_JSON_DOC:
        return None
    line = head.lstrip().split(b"\n", 1)[0]
    try:
        json.loads(line)
        return None  # the first line is a whole record: JSON lines
    except ValueError:
        pass
    try:
        doc = json.loads(f.read())
    except ValueError:
        return None
    finally:
        f.seek(0)
    records = doc.get("log_history") if isinstance(doc, dict) else doc
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        return None
    return records


def _as_lines(records: list[dict]) -> str:
    """One JSON line per record, numbers only, so the line parser reads it like any JSON-lines log."""
    return "".join(json.dumps({k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}) + "\n"
                   for r in records)


def feed_file(f, size: int, parser: "_Parser", tick: Callable[[int], None]) -> int:
    """Feed the whole file to `parser` (a JSON document's records, else its lines); bytes read."""
    records = json_records(f, size)
    if records is not None:
        parser.feed(_as_lines(records))
        tick(size)
        return size
    return _read_chunks(f, size, parser, tick)


def _read_chunks(f, size: int, parser: _Parser, tick: Callable[[int], None]) -> int:
    """Feed `parser` the file in chunks of whole lines, on worker processes for a big file; bytes read."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(_MAX_WORKERS, cores - 1)  # this thread scans too, whenever it would wait for them
    posix = os.name == "posix" and bool(sys.executable)  # workers pread an inherited descriptor
    if size < _PARALLEL_MIN or workers < 1 or not posix or not _POOL_SLOT.acquire(blocking=False):
        return _read_sequential(f, parser, tick)
    try:
        try:
            pool = ScanPool(f.fileno(), workers)
        except OSError:
            return _read_sequential(f, parser, tick)
        with pool:
            start, pos = _read_parallel(f.fileno(), size, parser, pool, tick)
    finally:
        _POOL_SLOT.release()
    f.seek(pos)  # what was appended since the start, and the last line, as the sequential loop reads them
    return _read_sequential(f, parser, tick, pos, _pread(f.fileno(), pos - start, start), first=False)


def _read_sequential(f, parser: _Parser, tick: Callable[[int], None], done: int = 0, rest: bytes = b"",
                     first: bool = True) -> int:
    while True:
        block = f.read(_READ_FIRST if first else _READ)
        first = False
        if not block:
            break
        done += len(block)
        data = rest + block
        cut = data.rfind(b"\n")
        if cut < 0 and len(data) < 4 * _READ:
            rest = data
            continue
        if cut < 0:
            cut = len(data) - 1  # one enormous line: parse what we have
        rest = data[cut + 1:]
        parser.feed(clean(data[:cut + 1]))
        tick(done)
    if rest:
        parser.feed(clean(rest + b"\n"))
    return done


def _read_parallel(fd: int, size: int, parser: _Parser, pool: ScanPool, tick: Callable[[int], None]) -> tuple[int, int]:
    """The chunks `_read_sequential` would cut from the first `size` bytes, scanned ahead by the pool (and by
    this thread while it would wait for it), fed to the parser strictly in file order; the rest's (start, end)."""
    cutter = _Cutter(fd, size)
    window: deque[list] = deque()  # [(start, end), bytes read then, worker's ticket, own scan]
    while True:
        while len(window) < (_AHEAD * len(pool.procs) + _STEAL if parser.templates else 1):  # the head teaches templates
            span = cutter.next()
            if span is None:
                break
            window.append([span, cutter.pos, None, None])
        if not window:
            return cutter.start, cutter.pos
        spec = parser.spec_now()
        for c in window:  # the earliest chunks go to the workers, so that what this thread scans is needed later
            if spec and c[2] is None and c[3] is None and pool.busy() < _AHEAD * len(pool.procs):
                c[2] = pool.submit(*c[0], spec)
        head = window[0]
        spare = next((c for c in window if c[2] is None and c[3] is None), None) if spec else None
        if head[2] is not None and spare is not None and not pool.ready(head[2]) \
                and sum(c[3] is not None for c in window) < _STEAL:
            spare[3] = parser.scan_ahead(_chunk_loader(fd, *spare[0]))  # rather than wait idle
            continue
        window.popleft()
        (start, end), pos, ticket, scanned = head
        # the parser reads the chunk itself only when the scan does not hold (or there is none)
        parser.feed(_chunk_loader(fd, start, end), pool.result(ticket) if ticket is not None else scanned)
        tick(pos)


def _chunk_loader(fd: int, start: int, end: int) -> Callable[[], bytes | str]:
    return functools.cache(lambda: clean(_pread(fd, end - start, start)))


class _Cutter:
    """The chunk ends of the sequential read loop, found by reading only near them."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size = fd, size
        self.start = self.pos = 0  # where the unparsed rest starts; how far the loop would have read
        self.clear = 0  # [start, clear) holds no newline: a line longer than a read

    def next(self) -> tuple[int, int] | None:
        while self.pos < self.size:
            self.pos = min(self.pos + (_READ if self.pos else _READ_FIRST), self.size)
            cut = _last_newline(self.fd, max(self.start, self.clear), self.pos)
            if cut is None:  # the file shrank: the sequential loop reads on from the rest
                self.pos = self.size = self.start
                return None
            if cut < 0 and self.pos - self.start < 4 * _READ:
                self.clear = self.pos
                continue
            end = cut + 1 if cut >= 0 else self.pos  # no newline at all: one enormous line, parse what we have
            span = (self.start, end)
            self.start = self.clear = end
            return span
        return None


def _last_newline(fd: int, lo: int, hi: int) -> int | None:
    """Offset of the last newline in [lo, hi), -1 without one, None when the file no longer reaches `hi`."""
    while hi > lo:
        n = min(hi - lo, _BLOCK)
        buf = os.pread(fd, n, hi - n)
        if len(buf) < n:
            return None
        i = buf.rfind(b"\n")
        if i >= 0:
            return hi - n + i
        hi -= n
    return -1


def _pread(fd: int, n: int, at: int) -> bytes:
    parts = []
    while n > 0:
        part = os.pread(fd, n, at)
        if not part:
            break
        parts.append(part)
        n -= len(part)
        at += len(part)
    return b"".join(parts) if len(parts) != 1 else parts[0]


_is_val = logfields.is_val
_is_lr = logfields.is_lr


def _pick_loss(series: dict[str, _Series]) -> tuple[_Series | None, _Series | None]:
    losses = [s for s in series.values() if logfields.kind(s.name) == "loss" and s.count]
    train = [s for s in losses if not _is_val(s.name)]
    val = [s for s in losses if _is_val(s.name)]
    pref = ("loss", "train_loss", "train/loss", "training_loss", "loss/train", "lm_loss", "train_loss_step")
    # a name alone does not make the training curve: a summary line at the end ("backtest loss=0.61", "test
    # loss") is one point beside an epoch-by-epoch train_loss
    most = max((s.count for s in train), default=0)
    train.sort(key=lambda s: (4 * s.count < most, s.name.lower() not in pref,
                              pref.index(s.name.lower()) if s.name.lower() in pref else 0, -s.count))
    # the loss the log names as validation (val before eval before test), and the fullest of those
    order = ("val", "valid", "eval", "test")

    def val_rank(s: _Series) -> tuple:
        low = s.name.lower()
        return (not low.endswith("loss"), next((i for i, w in enumerate(order) if w in low), len(order)),
                "ppl" in low, -s.count)

    val.sort(key=val_rank)
    return (train[0] if train else (losses[0] if losses else None)), (val[0] if val else None)


_KIND_ORDER = ("loss", "lr", "grad_norm", "metric", "memory", "throughput")


def _summarise(path, done, series, want, names, step_source: str, config: dict[str, str], notes) -> LogMetricsReport:
    loss, val = _pick_loss({k: v for k, v in series.items() if want is None or k.lower() in want})
    chosen = [s for s in series.values() if want is None or s.name.lower() in want]
    # what a diagnosis reads first: the losses, the LR, the gradient norm; speed and memory last
    chosen.sort(key=lambda s: (s is not loss, s is not val, _KIND_ORDER.index(logfields.kind(s.name)), -s.count))
    shown, others = (chosen, []) if want is not None else (chosen[:_SHOWN], chosen[_SHOWN:])
    stats = []
    for s in shown:
        stats.append(SeriesStats(
            name=s.name, kind=logfields.kind(s.name), count=s.count, first=s.first, last=s.last,
            min=s.lo if s.lo != _INF else None, max=s.hi if s.hi != -_INF else None,
            nonfinite=s.nonfinite, first_nonfinite_step=_step_out(s.first_nonfinite_step),
            first_step=_step_out(s.first_step), last_step=_step_out(s.last_step),
            smoothed_last=_sig(s.ema()), trend=_trend(s.curve()[1])))
    found = {s.name.lower() for s in stats}
    not_found = [n for n in names or [] if n.lower() not in found]
    if not_found:
        notes.append("available series: " + ", ".join(sorted(series)[:40]))
    report = LogMetricsReport(path=str(path), bytes_read=done, step_source=step_source, series=stats,
                              other_series=[s.name for s in others][:60],
                              loss_series=loss.name if loss else None, val_series=val.name if val else None,
                              not_found=not_found, notes=notes)
    if loss:
        report.shape, report.findings = classify(loss, val, Path(path).name)
    lrs = [s for s in chosen if logfields.kind(s.name) == "lr" and s.count]
    if lrs:  # the schedule the run used, against what its header configures
        lr = max(lrs, key=lambda s: s.count)
        nan_step = _float(loss.first_nonfinite_step) if loss is not None and loss.nonfinite else None
        report.findings += lr_schedule.schedule_findings(
            _curve(lr), _curve(loss) if loss else None, nan_step if nan_step == nan_step else None, report.shape,
            lr_schedule.Config.from_log(config, step_source))
    return report


def _curve(s: "_Series") -> lr_schedule.Curve:
    steps, mean = s.curve()
    return lr_schedule.Curve(s.name, steps, mean, s.b_min, s.b_max)


# --------------------------------------------------------------------------- curve shapes


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def _trend(y: list[float]) -> Trend:
    if len(y) < 6:
        return "unknown"
    k = max(2, len(y) // 5)
    late, before = _median(y[-k:]), _median(y[-2 * k:-k])
    rel = (late - before) / max(abs(before), 1e-12)
    return "decreasing" if rel < -0.02 else "increasing" if rel > 0.02 else "flat"


def _smooth(y: list[float]) -> list[float]:
    """Running median over ~5% of the curve: the trend without the minibatch noise."""
    w = max(1, len(y) // 40)
    return [_median(y[max(0, i - w):i + w + 1]) for i in range(len(y))]


def classify(loss: _Series, val: _Series | None, src_name: str) -> tuple[Shape, list[Finding]]:
    """Shape of the training loss curve and the findings it implies (thresholds from the loss-curve-reading skill)."""
    src = f"series {loss.name}"
    steps, y = loss.curve()
    ev_base = [Evidence(what=f"{loss.name} first", value=loss.first, source=f"{src} step {_step_out(loss.first_step)}"),
               Evidence(what=f"{loss.name} last", value=loss.last, source=f"{src} step {_step_out(loss.last_step)}")]

    if loss.nonfinite and not is_finite(loss.last):
        at = _step_out(loss.first_nonfinite_step)
        before = [b for b, st in zip(loss.b_max, steps) if at is None or st < at]
        spike = len(before) >= 8 and max(before[-3:]) > 3 * _median(before[:-3])
        shape: Shape = "spike_then_nan" if spike else "nan_death"
        ev = [Evidence(what="first non-finite step", value=at, source=src),
              Evidence(what="non-finite values", value=loss.nonfinite, source=src),
              Evidence(what="last finite value", value=y[-1] if y else None, source=src)]
        if spike:
            ev.append(Evidence(what="max before NaN / median before", value=max(before[-3:]) / max(_median(before[:-3]), 1e-12), source=src))
        return shape, [Finding(failure_mode="nan_inf", confidence=0.9,
                               summary=f"{loss.name} became non-finite at step {at} and stayed non-finite"
                                       + (" after a spike" if spike else ""),
                               evidence=ev,
                               fix=f"Run nan_hook_run to find the first op that produces NaN/Inf before step {at}; "
                                   "check log(0), division by zero, exp overflow, fp16 overflow")]
    if len(y) < 8:
        return "too_short", []

    n = len(y)
    k = max(1, n // 20)
    sm = _smooth(y)
    start, end = _median(y[:k]), _median(y[-max(1, n // 10):])
    lo = min(sm)
    i_lo = sm.index(lo)
    drop = start - end
    level = max(abs(_median(y)), 1e-12)
    w = max(2, n // 40)  # a moving mean, not the median: the median snaps to one side of a zig-zag
    mean = [sum(y[max(0, i - w):i + w + 1]) / len(y[max(0, i - w):i + w + 1]) for i in range(n)]
    noise = _median([abs(a - b) for a, b in zip(y, mean)]) / level  # typical wiggle around the trend
    findings: list[Finding] = []

    def ev(*extra: Evidence) -> list[Evidence]:
        return [*ev_base, *extra]

    if loss.nonfinite:
        findings.append(Finding(failure_mode="nan_inf", confidence=0.5,
                                summary=f"{loss.nonfinite} non-finite {loss.name} values, the run recovered",
                                evidence=ev(Evidence(what="first non-finite step", value=_step_out(loss.first_nonfinite_step), source=src)),
                                fix="Find the batch at that step; AMP's GradScaler skips such steps, a NaN loss outside AMP is a bug"))

    # An LR finding from the loss curve's shape alone stays below 0.5: many other causes draw the same shape;
    # the LR series (tools/lr_schedule.py) or a probe raise it.
    if noise > 0.25 and drop < 0.5 * abs(start):
        findings.append(Finding(failure_mode="lr_too_high", confidence=0.45,
                                summary=f"{loss.name} oscillates: typical swing {noise:.0%} of its level without settling",
                                evidence=ev(Evidence(what="relative swing (median |residual| / level)", value=noise, source=src)),
                                fix="Lower the LR 3-10x or raise the batch size; a periodic pattern means the data order (check shuffling with data_check)"))
        return "oscillating", findings

    # diverging: ends well above where it started, or gives back more than half of the progress it had made
    if end > 1.5 * start and end > lo * 1.5 or (i_lo < 0.8 * n and lo < 0.8 * start and end - lo > 0.5 * (start - lo)):
        shape = "diverging"
        e = ev(Evidence(what="start (median first 5%)", value=start, source=src),
               Evidence(what="end (median last 10%)", value=end, source=src),
               Evidence(what="minimum", value=lo, source=f"{src} step {_step_out(steps[i_lo])}"))
        findings += [
            Finding(failure_mode="lr_too_high", confidence=0.45, summary=(
                        f"{loss.name} diverges: {start:.4g} -> {end:.4g} (min {lo:.4g})" if end > start else
                        # ending under its start it has not diverged: it gave back part of what it had reached
                        f"{loss.name} gave back {(end - lo) / (start - lo):.0%} of its progress: {start:.4g} -> min "
                        f"{lo:.4g} -> {end:.4g} (a noisy loss's lowest point overstates its progress)"),
                    evidence=e, fix="Lower the learning rate 3-10x (confirm with grad_norm_snapshot: update/weight ratio above 1e-1); add warmup for large batches"),
            Finding(failure_mode="exploding_gradients", confidence=0.4, summary="growing loss often comes with a growing gradient norm",
                    evidence=e, fix="grad_norm_snapshot: global norm above 10 confirms it; static_scan for a missing optimizer.zero_grad()"),
        ]
        return shape, findings

    if val is not None:
        tv = _train_val_divergence(loss, val, src_name)
        if tv:
            return "train_val_divergence", findings + [tv]

    head = _median(y[:max(3, n // 100)])
    early = _median(y[n // 20:n // 10 + 1])
    total = head - end
    if total > 0.3 * abs(head) and (head - early) > 0.85 * total:
        e = ev(Evidence(what="drop by 5-10% of the run / total drop", value=(head - early) / total, source=src))
        converged = _converged(max(head, y[0]), end, val)  # the first value: a drop can be over by the second point
        if converged is not None:  # fast and low, validation following: a good run, not an LR problem
            return "converged", findings + [Finding(
                failure_mode="healthy", confidence=0.6,
                summary=f"{loss.name} converged fast: {max(head, y[0]):.4g} -> {early:.4g} by step {_step_out(steps[n // 10])}, "
                        f"then stays low ({end:.4g} at the end)" + (f"; {val.name} follows it down" if val else ""),
                evidence=[*e, *converged],
                fix="Nothing to fix: an easy task or a good setup. If the task should be hard, a loss this low this early "
                    "can mean the inputs contain the answer (data_check, init_loss_check)")]
        findings += [
            Finding(failure_mode="lr_too_high", confidence=0.35, summary=f"hockey-stick {loss.name}: a sharp early drop, then flat at {end:.4g}",
                    evidence=e, fix="If init_loss_check is ok, run lr_range_test and lower the LR; the run may sit in a fast, poor basin"),
            Finding(failure_mode="bad_init", confidence=0.35, summary="a hockey stick is also the net spending its first steps learning the output bias",
                    evidence=e, fix="init_loss_check first: initialise the last layer so the initial loss is at chance (ln C)"),
        ]
        return "hockey_stick", findings

    spikes = [st for st, hi, m in zip(steps, loss.b_max, sm) if hi > 3 * max(abs(m), 1e-12) and hi > 1.5 * start]
    if spikes and end <= start:
        findings.append(Finding(failure_mode="data_pipeline", confidence=0.25,
                                summary=f"{loss.name} spikes and recovers ({len(spikes)} spike region(s))",
                                evidence=ev(Evidence(what="spike steps", value=", ".join(str(_step_out(s)) for s in spikes[:10]), source=src)),
                                fix="Inspect the batches at those steps for outliers/corrupt samples; with a large batch, add LR warmup"))
        return "spike_and_recover", findings

    if abs(drop) < 0.05 * max(abs(start), 1e-12):
        e = ev(Evidence(what="relative change start -> end", value=-drop / max(abs(start), 1e-12), source=src))
        findings += [
            # a symptom (it names no cause): a measured or a code finding of the same mode leads it when merged
            Finding(failure_mode="data_pipeline", confidence=0.3, summary=f"{loss.name} is flat from the start ({start:.4g} -> {end:.4g})",
                    evidence=e, fix="overfit_test on one batch: if it cannot overfit, check data_check (labels vs inputs) and the loss",
                    facts={"symptom_only": True}),
            Finding(failure_mode="lr_too_low", confidence=0.3, summary="a flat loss can be an LR far too low",
                    evidence=e, fix="grad_norm_snapshot: update/weight ratio far below 1e-3 means raise the LR"),
            Finding(failure_mode="bad_init", confidence=0.2, summary="a flat loss can be a saturated or constant-output init",
                    evidence=e, fix="init_loss_check: the initial loss should be near chance (ln C)"),
        ]
        return "plateau", findings

    if drop > 0.05 * abs(start) and n >= 16:
        half = n // 2
        slope1 = (y[0] - _median(y[half - k:half + 1])) / max(half, 1)
        slope2 = (_median(y[half - k:half + 1]) - end) / max(n - half, 1)
        if slope1 > 0 and slope2 > 0.6 * slope1 and drop < 0.5 * abs(start):
            findings.append(Finding(failure_mode="lr_too_low", confidence=0.45,
                                    summary=f"slow burn: {loss.name} falls steadily ({start:.4g} -> {end:.4g}) and never bends",
                                    evidence=ev(Evidence(what="slope 2nd half / 1st half", value=slope2 / slope1, source=src)),
                                    fix="grad_norm_snapshot: an update/weight ratio far below 1e-3 confirms it; raise the LR (lr_range_test)"))
            return "slow_burn", findings

    if drop > 0.05 * abs(start):
        findings.append(Finding(failure_mode="healthy", confidence=0.5,
                                summary=f"{loss.name} decreases: {start:.4g} -> {end:.4g}",
                                evidence=ev(), fix="Nothing to fix in the curve; compare the final value with what you expect (chance = ln C)"))
        return "decreasing", findings
    return "unclear", findings


def _converged(head: float, end: float, val: "_Series | None") -> list[Evidence] | None:
    """Fast and low is convergence when the train loss lost at least 85% of its start and validation at least
    half as much; without validation, 95% (a bad init's hockey stick also drops most of its start): the
    evidence, else None."""
    if head <= 0 or end > 0.15 * head:
        return None
    if val is None:
        return [Evidence(what="end / start of the loss", value=end / head, source="log_metrics")] if end <= 0.05 * head else None
    _, vy = val.curve()
    if len(vy) < 2 or vy[0] <= 0:
        return None
    v_end = _median(vy[-max(1, len(vy) // 5):])
    v_gone = 1 - v_end / vy[0]
    if v_gone < 0.5 * (1 - end / head):
        return None
    return [Evidence(what="end / start of the loss", value=end / head, source="log_metrics"),
            Evidence(what=f"end / start of {val.name}", value=v_end / vy[0], source="log_metrics")]


def _train_val_divergence(loss: _Series, val: _Series, src_name: str) -> Finding | None:
    vs, vy = val.curve()
    if len(vy) < 4:
        return None
    sm = _smooth(vy)
    v_lo = min(sm)
    i = sm.index(v_lo)
    v_end = sm[-1]
    if i > 0.9 * (len(vy) - 1) or v_end < 1.1 * v_lo:
        return None  # validation still at (or near) its best at the end
    if v_end - v_lo < 0.1 * (max(sm[:i + 1]) - v_lo):
        return None  # a wobble near the floor, small next to how far validation fell
    after = vy[i:]
    jitter = _median([abs(b - a) for a, b in zip(after, after[1:])]) if len(after) > 2 else 0.0
    if v_end - v_lo < 2 * jitter:
        return None  # the rise is within validation's own step-to-step noise (dropout left on in eval looks so)
    ts, ty = loss.curve()
    at = [y for s, y in zip(ts, ty) if s >= vs[i]]
    if len(at) < 2 or _median(at[-max(1, len(at) // 5):]) >= at[0]:
        return None  # train did not keep improving after validation's best
    src = f"log_metrics {src_name}"
    # how far validation fell before it turned: ~0 is a model that never generalised, memorising from the start
    fell = 1 - v_lo / vy[0] if vy[0] > 0 else None
    train_end = _median(at[-max(1, len(at) // 5):])
    return Finding(failure_mode="overfitting", confidence=0.7,
                   facts={"val_fell": fell, "val_end": v_end, "train_end": train_end},
                   summary=f"{loss.name} keeps falling while {val.name} turned up after step {_step_out(vs[i])}",
                   evidence=[Evidence(what=f"{val.name} best", value=v_lo, source=f"{src} step {_step_out(vs[i])}"),
                             Evidence(what=f"{val.name} end", value=v_end, source=src),
                             Evidence(what=f"{loss.name} at best val step", value=at[0], source=src),
                             Evidence(what=f"{loss.name} end", value=at[-1], source=src)],
                   fix="Early-stop at the best validation step; add data/augmentation, weight decay (0.01-0.1) or dropout (0.1-0.3)")
