"""The hot path of `log_metrics`: one chunk of whole lines -> metric columns under the learned templates.

Stdlib plus pydantic_core's JSON parser, because this file is also the worker that `ScanPool` starts
(`python -I -S logscan.py FD SPOOL SITE`): a bare interpreter starts in milliseconds and the chunks of a big
log are scanned on every core. What the columns mean (steps carried between lines, series statistics) stays
in tools/logs.py.
"""

import math
import os
import pickle
import re
import select
import shutil
import struct
import subprocess
import sys
import tempfile
from array import array
from itertools import compress, count, repeat
from operator import is_, is_not

if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[3]:
    sys.path.append(sys.argv[3])  # the worker skips site (-S) to start fast: the directory pydantic_core is in
try:
    from pydantic_core import from_json
except ImportError:  # the worker could not find it: every column takes the float() path
    from_json = None

ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
_ANSI_B = re.compile(ANSI.pattern.encode())
# C0 bytes a str regex counts as whitespace (\s) and a bytes regex does not
_STR_ONLY_SPACE = (b"\x1c", b"\x1d", b"\x1e", b"\x1f")


def chunk_text(b: bytes) -> str:
    text = b.decode("utf-8", "replace")
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")  # each tqdm state is a record
    if "\x00" in text:
        text = text.replace("\x00", "")
    return text


def clean(raw: bytes) -> bytes | str:
    """`chunk_text`, kept as bytes where a bytes regex and float() give exactly what they give on the text.

    Bytes skip the decode and make the template regex ~1.5x faster; that holds for ASCII without the
    separators \\x1c-\\x1f, which only str regexes (and str float()) treat as whitespace.
    """
    if not raw.isascii() or any(c in raw for c in _STR_ONLY_SPACE):
        return chunk_text(raw)
    if b"\x1b" in raw:
        raw = _ANSI_B.sub(b"", raw)
    if b"\r" in raw:
        raw = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if b"\x00" in raw:
        raw = raw.replace(b"\x00", b"")
    return raw


def as_str(text: bytes | str) -> str:
    return text.decode("ascii") if isinstance(text, bytes) else text  # bytes here are always ASCII (clean)


_THOUSANDS = re.compile(r"\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?\s*\Z")


def to_float(x) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        if isinstance(x, bytes):  # str float() also takes Unicode digits and spaces
            return to_float(x.decode("utf-8", "replace"))
        if isinstance(x, str) and "," in x and _THOUSANDS.match(x):
            return float(x.replace(",", ""))  # `902,558`: Python's `{:,}`; never a decimal comma (`1,5` stays NaN)
        return math.nan


_CACHE_MAX = 50000


class FloatCache(dict):
    """String -> float of one column, for as long as one parse lasts: for the pieces `_json_floats` leaves
    to float() (a column with nan or inf in it, an empty CSV cell).

    Logs print few significant digits, so values repeat, mostly across chunks (a loss curve revisits its
    values, an LR schedule holds each one for a while): a lookup costs half a float(). A column whose
    values fill the cache without repeating (timestamps) is converted plainly from then on.
    """
    looked = missed = 0
    plain = False


def floats(vals: list, cache: FloatCache) -> list[float]:
    got = _json_floats(vals)
    if got is not None:
        return got
    if cache.plain:
        return _plain(vals)
    got = list(map(cache.get, vals))
    if None not in got:
        return got
    misses = list(compress(count(), map(is_, got, repeat(None))))
    cache.looked += len(vals)
    cache.missed += len(misses)
    if len(cache) + len(misses) > _CACHE_MAX:
        if cache.missed * 2 > cache.looked:
            cache.plain = True
            return _plain(vals)
        cache.clear()
    get = cache.get
    for k in misses:  # the new values, and their repeats in `vals`
        v = vals[k]
        f = get(v)
        if f is None:
            f = cache[v] = to_float(v)
        got[k] = f
    return got


_JSON_NUMBER = b"0123456789.eE+-"


def _json_floats(vals: list) -> list[float] | None:
    """The cells as float() reads them, parsed as one JSON array in Rust (several times cheaper than float()
    per cell); None when a cell is not a plain JSON number (nan, inf, 1., +1, 1_0, an empty CSV cell: those
    take float()).

    pydantic_core rounds exactly as float() does (checked bit for bit in tests/test_logscan.py); what JSON
    reads differently is ruled out here: a comma inside a cell, true/false/null, and the integer -0.
    """
    if from_json is None or not vals:
        return None
    try:
        joined = b",".join(vals) if type(vals[0]) is bytes else ",".join(vals).encode("ascii")
    except (TypeError, UnicodeEncodeError):
        return None
    if joined.translate(None, _JSON_NUMBER + b",") or joined.count(b",") != len(vals) - 1:
        return None
    try:
        got = from_json(b"[" + joined + b"]")
    except ValueError:
        return None
    if len(got) != len(vals):
        return None  # one empty cell reads as []
    if joined.count(b".") == len(vals):  # a JSON number holds one dot at most: every cell is a float literal
        return got
    if (b"-0" if type(vals[0]) is bytes else "-0") in vals:
        return None  # JSON's integer 0, float()'s -0.0
    try:
        return list(map(float, got))  # integer cells: float(int) rounds as float(str) does
    except OverflowError:
        return None  # an integer beyond float range: float() of its text gives inf


def _plain(vals: list) -> list[float]:
    try:
        return list(map(float, vals))
    except ValueError:
        return [to_float(v) for v in vals]


# --------------------------------------------------------------------------- one chunk

# A spec is what a scan needs of the parser: (the regex source, ((keys, step index, wanted flags, dense), ...)).
# Dense templates (key/value lines) never capture an empty cell, so only CSV columns are checked for them.


def compile_spec(pattern: str, text: bytes | str) -> re.Pattern:
    return re.compile(pattern.encode() if isinstance(text, bytes) else pattern)


_PIECE = 64 << 10  # scanned at a time: its regex split and cells stay in the CPU caches, even with workers on each core


def scan(text: bytes | str, rx: re.Pattern, templates: tuple, caches: dict, compact: bool = False) -> dict:
    """The columns of one chunk: per template its row count, step tokens and float columns, plus the
    lines no template matched (`odd`: gap index, text, step of the row above) for the caller's line parser.

    The same as one `rx.split` of the whole chunk, done piece by piece: a template matches one line,
    so cutting at line ends changes no match, and the gap across a cut is the two halves joined.
    `compact` (to send to another process, see `unpack`): steps as one joined string, columns as array('d').
    """
    cols = _Columns(templates, caches, compact, b"\n" if isinstance(text, bytes) else "\n")
    all_steps = all(t[1] is not None for t in templates)
    odd, total, last, pending = [], 0, None, None
    for piece in _pieces(text, cols.nl):
        flat = rx.split(piece)
        gaps = flat[0::cols.stride]
        n = len(gaps) - 1
        gap = gaps[0] if pending is None else pending + gaps[0]
        if not n:
            pending = gap
            continue
        if len(gap) > 1:
            odd.append((total, as_str(gap), last if total else None))
        odd += [(total + k, as_str(gaps[k]), cols.step_of_row(flat, k - 1) if all_steps else None)
                for k in _odd_gaps(gaps, cols.nl)]
        cols.add(flat, n)
        last = cols.step_of_row(flat, n - 1) if all_steps else None
        total += n
        pending = gaps[n]
    if pending is not None and len(pending) > 1:
        odd.append((total, as_str(pending), last if total else None))
    return {"n": len(templates), "nrows": total, "odd": odd, "last": last, **cols.result()}


def _pieces(text, nl):
    i, n = 0, len(text)
    while i < n:
        j = text.rfind(nl, i, i + _PIECE) + 1 if i + _PIECE < n else n
        if j <= i:  # a line longer than a piece
            j = text.find(nl, i + _PIECE) + 1 or n
        yield text[i:j]
        i = j


def _odd_gaps(gaps: list, nl) -> list[int]:
    """Indices of the gaps between two rows that hold lines no template matched (not just the newline)."""
    inner = gaps[1:-1]
    if inner.count(nl) == len(inner):
        return []
    # CPython keeps one b"\n" (and one "\n"): an identity test finds the candidates at C speed
    return [k for k in compress(count(1), map(is_not, inner, repeat(nl))) if len(gaps[k]) > 1]


class _Columns:
    """The columns of each template, appended to piece by piece."""

    def __init__(self, templates: tuple, caches: dict, compact: bool, nl):
        self.templates, self.caches, self.compact, self.nl = templates, caches, compact, nl
        self.stride = 1 + sum(len(t[0]) for t in templates)
        self.rows = [0] * len(templates)
        self.steps = [[] if t[1] is not None else None for t in templates]
        # per wanted key: its floats, and per piece a keep-mask or (all kept) the count
        self.vals = [{j: (array("d") if compact else [], []) for j in range(len(t[0])) if j != t[1] and t[2][j]}
                     for t in templates]

    def step_of_row(self, flat: list, r: int):
        base = r * self.stride + 1
        for keys, step, _w, _d in self.templates:
            if flat[base] is not None:
                return as_str(flat[base + step])
            base += len(keys)

    def add(self, flat: list, nrows: int) -> None:
        off, empty, shared = 1, self.nl[:0], len(self.templates) > 1
        for t, (keys, step, wanted, dense) in enumerate(self.templates):
            cols = _template_columns(flat, self.stride, off, len(keys), step, wanted, shared)
            if not shared:
                self.rows[t] += nrows
            elif cols:
                self.rows[t] += len(next(iter(cols.values())))
            else:  # neither a step nor a wanted key: count its rows all the same (line-order steps)
                self.rows[t] += nrows - flat[off::self.stride].count(None)
            off += len(keys)
            if step is not None and self.compact:
                if cols[step]:
                    self.steps[t].append(self.nl.join(cols[step]))  # joined while still in the CPU caches
            elif step is not None:
                self.steps[t] += cols[step]
            for j, (fv, keeps) in self.vals[t].items():
                col = cols[j]
                got = floats(col, self.caches.setdefault((keys[j], type(empty)), FloatCache()))
                fv.extend(array("d", got) if self.compact else got)  # array.extend(list) is 2x slower
                # empty CSV cells are missing values
                keeps.append([v != empty for v in col] if not dense and empty in col else len(col))

    def result(self) -> dict:
        steps = self.steps
        if self.compact:
            steps = [None if st is None else (r, self.nl.join(st)) for r, st in zip(self.rows, steps)]
        return {"rows": self.rows, "steps": steps,
                "vals": [[(j, fv, self._mask(keeps)) for j, (fv, keeps) in tv.items()] for tv in self.vals]}

    def _mask(self, keeps: list) -> list[bool] | bytes | None:
        """One keep-mask from the pieces' (a count where all cells were kept), None when all were."""
        if all(isinstance(k, int) for k in keeps):
            return None
        mask = [x for k in keeps for x in ([True] * k if isinstance(k, int) else k)]
        return bytes(mask) if self.compact else mask


def _template_columns(flat: list, stride: int, off: int, nkeys: int, step, wanted, shared: bool) -> dict:
    """{key index: cells of this template's rows} for the step and the wanted keys."""
    cols = {j: flat[off + j::stride] for j in range(nkeys) if j == step or wanted[j]}
    if not shared:
        return cols
    first = cols[0] if 0 in cols else flat[off::stride]  # a row is this template's when its first cell is set
    missing = first.count(None)
    if not missing:
        return cols
    if missing * 4 > len(first):  # a rare template: pick its rows
        mask = list(map(is_not, first, repeat(None)))
        return {j: list(compress(c, mask)) for j, c in cols.items()}
    holes, i = [], -1
    for _ in range(missing):  # the dominant template: cut out the few other rows, copying slices
        i = first.index(None, i + 1)
        holes.append(i)
    return {j: _without(c, holes) for j, c in cols.items()}


def _without(cells: list, holes: list[int]) -> list:
    kept, prev = [], 0
    for h in holes:
        kept += cells[prev:h]
        prev = h + 1
    kept += cells[prev:]
    return kept


# --------------------------------------------------------------------------- across processes


def unpack(s: dict) -> dict:
    """A compact scan as `scan` returns it otherwise."""
    def tokens(b):
        if b is None:
            return None
        n, joined = b
        return joined.split(b"\n" if isinstance(joined, bytes) else "\n") if n else []

    return {**s, "steps": [tokens(b) for b in s["steps"]],
            "vals": [[(j, fv.tolist(), None if keep is None else list(map(bool, keep))) for j, fv, keep in tv]
                     for tv in s["vals"]]}


def _serve(fd: int, spool: str) -> None:
    """Worker loop: (seq, start, end, spec) on stdin; each scan to the file `spool`/seq, then (seq, size) on
    stdout (size -1: no scan, the caller parses that chunk itself), until EOF."""
    try:
        _serve_jobs(fd, spool, sys.stdin.buffer, sys.stdout.buffer)
    except (BrokenPipeError, KeyboardInterrupt):
        pass  # the caller is gone or gave up: nothing left to answer


def _serve_jobs(fd: int, spool: str, inp, out) -> None:
    caches: dict = {}
    compiled: dict = {}
    while True:
        try:
            seq, start, end, (pattern, templates) = pickle.load(inp)
        except EOFError:
            return
        size = -1
        try:
            raw = os.pread(fd, end - start, start)
            if len(raw) == end - start:  # shorter: the file shrank under us; the caller reads it itself
                text = clean(raw)
                key = (pattern, type(text))
                rx = compiled.get(key) or compiled.setdefault(key, compile_spec(pattern, text))
                data = pickle.dumps(scan(text, rx, templates, caches, compact=True), protocol=pickle.HIGHEST_PROTOCOL)
                with open(os.path.join(spool, str(seq)), "wb") as f:
                    f.write(data)
                size = len(data)
        except Exception:  # the caller parses this chunk itself, exactly as without workers
            size = -1
        out.write(_DONE.pack(seq, size))
        out.flush()


_DONE = struct.Struct("<qq")


def _spool_dir() -> str:
    """Where results wait for the caller: memory (/dev/shm) when there is room, else the temp dir."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize > 256 << 20 and os.access("/dev/shm", os.W_OK):
            return tempfile.mkdtemp(prefix="mltriage-scan-", dir="/dev/shm")
    except OSError:
        pass
    return tempfile.mkdtemp(prefix="mltriage-scan-")


def _read_exactly(fd: int, n: int) -> bytes:
    """`n` bytes from a pipe (unbuffered, so that select() sees what is left), fewer at EOF."""
    data = b""
    while len(data) < n:
        part = os.read(fd, n - len(data))
        if not part:
            break
        data += part
    return data


# where the worker finds pydantic_core without loading site (nothing when the caller has none either)
_SITE = os.path.dirname(os.path.dirname(sys.modules["pydantic_core"].__file__)) if from_json else ""


class ScanPool:
    """Worker processes that scan byte ranges of one open file; results come back in submission order.

    Plain subprocesses rather than multiprocessing: safe to start from any thread (no fork of a threaded
    process), nothing of the caller's __main__ is re-imported, and nothing outlives `close()`.
    A scan travels as a file, its notice through a pipe: no thread of the caller has to be scheduled for a
    worker to hand over a result, and the caller takes it in one read.
    """

    def __init__(self, fd: int, workers: int):
        self.procs, self.next, self.waiting = [], 0, 0
        self.spool = _spool_dir()
        try:
            for _ in range(workers):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-I", "-S", os.path.abspath(__file__), str(fd), self.spool, _SITE],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, pass_fds=(fd,)))
        except BaseException:
            self.close(now=True)
            raise

    def submit(self, start: int, end: int, spec: tuple) -> tuple[int, int] | None:
        """A ticket for `result`, or None when no worker can take the job."""
        seq = self.next
        self.next += 1
        w = seq % len(self.procs)
        try:
            pickle.dump((seq, start, end, spec), self.procs[w].stdin, protocol=pickle.HIGHEST_PROTOCOL)
            self.procs[w].stdin.flush()
        except (OSError, ValueError):
            return None
        self.waiting += 1
        return w, seq

    def busy(self) -> int:
        """Jobs submitted whose result has not been taken."""
        return self.waiting

    def ready(self, ticket: tuple[int, int]) -> bool:
        """Whether `result(ticket)` would return at once (for the oldest ticket not yet taken)."""
        return bool(select.select([self.procs[ticket[0]].stdout.fileno()], [], [], 0)[0])

    def result(self, ticket: tuple[int, int] | None) -> dict | None:
        """The scan of a submitted range, or None (worker gone or failed): the caller parses it itself."""
        if ticket is None:
            return None
        w, seq = ticket
        self.waiting -= 1
        notice = _read_exactly(self.procs[w].stdout.fileno(), _DONE.size)
        if len(notice) < _DONE.size:
            return None  # the worker is gone: this and its later chunks are parsed by the caller
        got, size = _DONE.unpack(notice)
        assert got == seq, "results of a worker come back in submission order"
        if size < 0:
            return None
        path = os.path.join(self.spool, str(seq))
        try:
            with open(path, "rb") as f:
                data = f.read()
        finally:
            os.unlink(path)
        return unpack(pickle.loads(data)) if len(data) == size else None

    def close(self, now: bool = False) -> None:
        """Stop the workers: idle ones exit at EOF; with `now` (cancelled, failed) they are killed mid-scan."""
        for p in self.procs:
            if now:
                p.kill()
            try:
                p.stdin.close()
            except OSError:
                pass
        for p in self.procs:
            try:
                p.wait(timeout=2)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            p.stdout.close()
        shutil.rmtree(self.spool, ignore_errors=True)  # results nobody took

    def __enter__(self) -> "ScanPool":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(now=exc_type is not None)


if __name__ == "__main__":
    _serve(int(sys.argv[1]), sys.argv[2])
