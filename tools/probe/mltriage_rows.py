"""Do the rows that reach the loss keep their own labels? A canary through the user's CSV pipeline.

The factory is run twice. The first time the tables it reads (pandas.read_csv, csv.DictReader, csv.reader) are recorded.
The second time every table is coded before their code sees it: each row gets an id (its key's, when tables
share a key column; else its position), and every float column and the label-like column are rewritten as a
function of that id modulo CODES (NaNs, keys, ids, timestamps and text kept). Whatever their pipeline then does
to the rows (drops, joins, sorts, reindexes, splits), in a batch that keeps rows whole each coded feature column
still determines the label. Features paired with other rows' labels do not: the share of rows whose label the
feature code predicts falls toward chance. A constant lag (a forecast of the next row) keeps the code a function
and is not flagged. Monotone transforms, scaling and one-hot encoding keep the code too.

The coding pass writes nothing of the user's: open() for writing raises inside it (except in a temporary
folder outside the workspace), so a factory that caches next to its data is skipped, never fed coded data into
a user's file.
"""

import builtins
import csv
import io
import math
import os
import re
import sys
import tempfile
from collections import Counter
from contextlib import contextmanager

import torch


CODES = 59  # a prime: a block of rows moved by a round number (600, 1800, 3000 rows) still changes its code
MAX_CELLS = 5_000_000  # a bigger table is read as it is: copying it column by column would cost more than the check
LOW_CARD = 50


class WritesFiles(RuntimeError):
    pass


# a number written for people: thousands separators, a currency sign, a percent sign, a decimal comma. Such a value
# that pandas.to_numeric(errors="coerce") turns into NaN was a number, not a missing value
FORMATTED_NUMBER = re.compile(r"^\s*[-+(]?\s*[$\u20ac\u00a3\u00a5]?\s*(\d{1,3}([,' \u00a0.]\d{3})+|\d+)([.,]\d+)?\s*%?"
                              r"\s*[$\u20ac\u00a3\u00a5]?\s*\)?\s*$")
COERCED: list = []  # what the factory's to_numeric(errors="coerce") calls lost of formatted numbers (record mode)


def note_coerced(arg, out, workspace: str) -> None:
    """Record a to_numeric(errors='coerce') call that turned 10 or more (and 5% or more) of its values into NaN
    although they were numbers in a format it does not read ('1,980', '$750', '12%')."""
    vals, res = list(arg), list(out)
    if len(vals) != len(res) or not vals:
        return
    lost = [v for v, r in zip(vals, res) if isinstance(v, str) and v.strip() and r != r]
    formatted = [v for v in lost if FORMATTED_NUMBER.match(v)]
    if len(formatted) >= 10 and len(formatted) >= 0.05 * len(vals):
        COERCED.append({"column": str(getattr(arg, "name", None) or "a column"), "values": len(vals),
                        "lost": len(lost), "formatted": len(formatted), "examples": formatted[:3],
                        "at": _caller(workspace, 3)})


TEXT_COMPARED: list = []  # a column of numbers read as text, compared with a number (record mode)


def note_text_compared(series, op: str, other, out, workspace: str) -> None:
    """Record `column == 1` / `column != 1` on a column pandas read as text because a few cells are not numbers
    ('?', 'n/a'): '1' is not 1, so the comparison is the same for every row and the filter it feeds keeps (!=) or
    drops (==) them all. Only when most cells are numbers written as text and the result is one value."""
    vals = [v for v in series.tolist() if isinstance(v, str) and v.strip()]
    if len(vals) < 10 or len(vals) < 0.5 * len(series):
        return
    numeric = [v for v in vals if _num(v) is not None]
    if len(numeric) < 0.8 * len(vals) or not any(_num(v) == other for v in numeric):
        return  # the number never occurs as text either: the comparison may mean what it says
    res = set(out.tolist())
    if len(res) != 1:
        return
    distinct = list(dict.fromkeys(vals))
    TEXT_COMPARED.append({"column": str(getattr(series, "name", None) or "a column"), "op": op, "value": other,
                          "values": len(series), "as_text": len(numeric), "result": bool(res.pop()),
                          "examples": distinct[:4], "at": _caller(workspace, 3)})


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class Plan:
    """What to code in each table, decided from the first, recorded pass."""

    def __init__(self, tables: list[dict], label_values: set[int]):
        # tables: per read, {"columns": {name: values}, "rows": n}
        self.k = label_values  # how many values a label column may have (none for a regression label)
        self.keys = set()
        for i, a in enumerate(tables):
            for b in tables[i + 1:]:
                if set(a["columns"]) == set(b["columns"]):
                    continue  # one schema read twice (a train and a test file): no key between them
                for c in set(a["columns"]) & set(b["columns"]):
                    if any(len(set(t["columns"][c])) >= 0.5 * max(1, t["rows"]) for t in (a, b)):
                        self.keys.add(c)  # an id in one of them: the column joins them
        self.key_ids: dict = {}
        for t in tables:
            key = self.key_of(t["columns"])
            if key is not None:
                for v in t["columns"][key]:
                    self.key_ids.setdefault(v, len(self.key_ids))
        # one coding per column name over every table that has it: a file per branch or per month, stacked
        # later, must code a value the same way in all of them
        union: dict = {}
        for t in tables:
            for c, v in t["columns"].items():
                union.setdefault(c, []).extend(v)
        self.kinds = {c: self.kind(v) for c, v in union.items() if c not in self.keys}

    def provenance(self, tables: list[dict]) -> list[dict]:
        """Where each table was read and which of its columns could be the label (coded as its classes)."""
        return [{"file": t.get("file"), "at": t.get("at"), "rows": t["rows"],
                 "label_like": [c for c in t["columns"] if (self.kinds.get(c) or ("",))[0] == "level"]}
                for t in tables]

    def key_of(self, columns) -> str | None:
        return next((c for c in columns if c in self.keys), None)

    def kind(self, values: list) -> tuple:
        """('level', level per code) | ('float', lo, hi) | ('int', lo, hi) | None (kept)."""
        present = [v for v in values if v is not None and v == v and v != ""]
        if not present:
            return None
        nums = [_num(v) for v in present]
        distinct = set(present)
        if len(distinct) in self.k:
            try:
                levels = sorted(distinct)
            except TypeError:
                return None
            counts = Counter(present)
            shares = [counts[v] / len(present) for v in levels]
            return ("level", allocation(levels, _skewed(shares)))
        if any(n is None or not math.isfinite(n) for n in nums) or len(distinct) <= LOW_CARD:
            return None
        lo, hi = min(nums), max(nums)
        if all(n == int(n) for n in nums):
            if len(distinct) >= 0.9 * len(present) or hi - lo < CODES - 1:
                return None  # ids and timestamps rows are sorted and joined by; small counts a pipeline may index with
            return ("int", int(lo), int(hi))  # a code per step at least: still one value per code
        return ("float", lo, hi)

    def coder(self, columns: dict):
        key = self.key_of(columns)
        kinds = {c: self.kinds.get(c) for c in columns if c not in self.keys}
        return key, {c: k for c, k in kinds.items() if k is not None}


def label_values(y: torch.Tensor, num_classes=None) -> set[int]:
    """How many values a label column may have: a label of few values (classes, even as floats) is coded as
    classes; none for a regression label."""
    k = len(torch.unique(y.reshape(-1)))
    if k > LOW_CARD:
        return set()
    return {k, int(num_classes)} if num_classes else {k}


def _skewed(shares: list[float]) -> bool:
    """Code a near-balanced label skewed and a skewed one balanced: the share of each class in the coded batches
    then shows whether the coding reached the label (mapping-free: sorted shares are compared)."""
    k = len(shares)
    return 0.5 * sum(abs(a - 1 / k) for a in shares) < 0.15


def allocation(levels: list, skewed: bool) -> list:
    """Which level each of the CODES codes gets: evenly, or most codes to the first level."""
    k = len(levels)
    if not skewed:
        return [levels[(r * k) // CODES] for r in range(CODES)]
    others = max(1, 15 // (k - 1)) if k > 1 else 0
    counts = [CODES - others * (k - 1)] + [others] * (k - 1)
    return [lv for lv, c in zip(levels, counts) for _ in range(c)]


def expected_shares(shares: list[float]) -> list[float]:
    """The sorted class shares a label coded from a column with these shares has."""
    alloc = allocation(list(range(len(shares))), _skewed(shares))
    return sorted((alloc.count(i) / CODES for i in range(len(shares))), reverse=True)


def _tv(a: list[float], b: list[float]) -> float:
    a, b = sorted(a, reverse=True), sorted(b, reverse=True)
    n = max(len(a), len(b))
    a, b = a + [0.0] * (n - len(a)), b + [0.0] * (n - len(b))
    return 0.5 * sum(abs(x - y) for x, y in zip(a, b))


def _code_value(kind, r, old, as_text):
    if old is None or old == "" or (isinstance(old, float) and old != old):
        return old
    if kind[0] == "level":
        return kind[1][r]
    lo, hi = kind[1], kind[2]
    v = lo + (hi - lo) * r // (CODES - 1) if kind[0] == "int" else lo + (hi - lo) * r / (CODES - 1)
    return str(v) if kind[0] == "int" and as_text else repr(v) if as_text else v


def _row_ids(plan: Plan, key, columns: dict, n: int) -> list[int]:
    if key is None:
        return list(range(n))
    return [plan.key_ids.get(v, hash(v)) % (1 << 30) for v in columns[key]]


def code_columns(plan: Plan, columns: dict, n: int, as_text: bool) -> tuple[dict, int]:
    key, kinds = plan.coder(columns)
    ids = _row_ids(plan, key, columns, n)
    out = dict(columns)
    for c, kind in kinds.items():
        out[c] = [_code_value(kind, i % CODES, old, as_text) for i, old in zip(ids, columns[c])]
    return out, len(kinds)


def _source(f) -> str:
    """The file a table came from, by name: a path, or the name of an open file."""
    name = f if isinstance(f, (str, os.PathLike)) else getattr(f, "name", None)
    return os.path.basename(os.fspath(name)) if isinstance(name, (str, os.PathLike)) else "a stream"


def _caller(workspace: str, depth: int = 2) -> str | None:
    """The line of the user's code that read the table (the innermost frame inside the workspace)."""
    if not workspace:
        return None
    own = os.path.realpath(workspace) + os.sep
    frame = sys._getframe(depth)
    while frame is not None:
        path = os.path.realpath(frame.f_code.co_filename)
        if path.startswith(own) and "site-packages" not in path:
            return f"{os.path.relpath(path, own)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextmanager
def reads(plan: Plan | None, record: list, workspace: str = ""):
    """Record (plan None) or code (plan given) every table read through pandas.read_csv, csv.DictReader or
    csv.reader."""
    real_dict_reader = csv.DictReader
    coded, busy = [0], [False]
    if plan is None:
        COERCED.clear()  # what this load's to_numeric calls lose, not an earlier one's
        TEXT_COMPARED.clear()

    class DictReader:
        def __init__(self, f, *args, **kwargs):
            rows = []
            busy[0] = True  # the csv.reader under it is not a table of its own
            try:
                inner = real_dict_reader(f, *args, **kwargs)
                rows = list(inner)
            finally:
                busy[0] = False
            self.fieldnames = inner.fieldnames
            self.line_num = inner.line_num
            self.dialect = inner.dialect
            names = list(self.fieldnames or [])
            columns = {c: [r.get(c) for r in rows] for c in names} if len(rows) * len(names) <= MAX_CELLS else {}
            if columns and plan is None:
                record.append({"columns": columns, "rows": len(rows), "file": _source(f), "at": _caller(workspace)})
            elif columns:
                new, k = code_columns(plan, columns, len(rows), as_text=True)
                coded[0] += k
                for c in names:
                    if new[c] is not columns[c]:
                        for r, v in zip(rows, new[c]):
                            r[c] = v
            self._it = iter(rows)

        def __iter__(self):
            return self

        def __next__(self):
            return next(self._it)

    real_reader = csv.reader

    class Rows:
        """What csv.reader returns, over rows already read (line_num and dialect kept)."""

        def __init__(self, inner, rows):
            self.dialect, self.line_num, self._it = inner.dialect, inner.line_num, iter(rows)

        def __iter__(self):
            return self

        def __next__(self):
            return next(self._it)

    def reader(f, *args, **kwargs):
        """csv.reader: lists of strings, a header first when its cells are not numbers (columns named by it)."""
        inner = real_reader(f, *args, **kwargs)
        if busy[0]:
            return inner
        rows = list(inner)
        if len(rows) < 3 or len({len(r) for r in rows[1:]}) != 1 or len(rows) * len(rows[1]) > MAX_CELLS:
            return Rows(inner, rows)  # ragged rows or a huge table: read as it is
        head = rows[0] if all(_num(c) is None for c in rows[0]) and len(rows[0]) == len(rows[1]) else None
        body = rows[1:] if head is not None else rows
        names = list(head) if head is not None else [f"column {i}" for i in range(len(body[0]))]
        if len(set(names)) != len(names):
            return Rows(inner, rows)
        columns = {c: [r[i] for r in body] for i, c in enumerate(names)}
        if plan is None:
            record.append({"columns": columns, "rows": len(body), "file": _source(f), "at": _caller(workspace)})
            return Rows(inner, rows)
        new, k = code_columns(plan, columns, len(body), as_text=True)
        coded[0] += k
        body = [list(r) for r in zip(*[new[c] for c in names])]
        return Rows(inner, ([head] if head is not None else []) + body)

    patches = [(csv, "DictReader", DictReader), (csv, "reader", reader)]
    pd = sys.modules.get("pandas")
    if pd is not None:
        real_read_csv = pd.read_csv

        def read_csv(*args, **kwargs):
            df = real_read_csv(*args, **kwargs)
            if not isinstance(df, pd.DataFrame) or df.size > MAX_CELLS:
                return df  # chunked readers and huge tables are left alone
            columns = {str(c): df[c].tolist() for c in df.columns}
            if plan is None:
                record.append({"columns": columns, "rows": len(df), "file": _source(args[0] if args else
                               kwargs.get("filepath_or_buffer")), "at": _caller(workspace)})
                return df
            new, k = code_columns(plan, columns, len(df), as_text=False)
            coded[0] += k
            df = df.copy()
            for c in df.columns:
                if new[str(c)] is not columns[str(c)]:
                    df[c] = pd.Series(new[str(c)], index=df.index, dtype=object).infer_objects()
            return df

        patches.append((pd, "read_csv", read_csv))
        if plan is None:
            real_to_numeric = pd.to_numeric

            def to_numeric(arg, *args, **kwargs):
                out = real_to_numeric(arg, *args, **kwargs)
                if kwargs.get("errors", args[0] if args else "raise") == "coerce":
                    try:
                        note_coerced(arg, out, workspace)
                    except Exception:  # noqa: BLE001 - an observation; the user's call has its answer already
                        pass
                return out

            patches.append((pd, "to_numeric", to_numeric))
            for op in ("__eq__", "__ne__"):
                patches.append((pd.Series, op, _compared(pd.Series, op, workspace)))
    if plan is not None:
        real_open = builtins.open

        scratch = os.path.realpath(tempfile.gettempdir())
        own = os.path.realpath(workspace) if workspace else None

        def guarded_open(file, mode="r", *args, **kwargs):
            path = os.path.realpath(os.fspath(file)) if isinstance(file, (str, bytes, os.PathLike)) else None
            in_scratch = path is not None and path.startswith(scratch + os.sep) and not (
                own and (path + os.sep).startswith(own + os.sep))
            if any(m in mode for m in "wax+") and not in_scratch:
                raise WritesFiles(f"the factory opens {file!r} for writing")
            return real_open(file, mode, *args, **kwargs)

        patches += [(builtins, "open", guarded_open), (io, "open", guarded_open)]
    with _stack(patches):
        yield coded


def _compared(cls, op: str, workspace: str):
    real = getattr(cls, op)
    is_text = sys.modules["pandas"].api.types.is_string_dtype

    def compare(self, other):
        out = real(self, other)
        # object dtype, or pandas 3's own text dtype ('str')
        if isinstance(other, (int, float)) and not isinstance(other, bool) and (
                self.dtype == object or is_text(self.dtype)):
            try:
                note_text_compared(self, "==" if op == "__eq__" else "!=", other, out, workspace)
            except Exception:  # noqa: BLE001 - an observation; the user's comparison has its answer already
                pass
        return out

    return compare


@contextmanager
def _stack(patches):
    if not patches:
        yield
        return
    obj, name, value = patches[0]
    with _patched(obj, name, value), _stack(patches[1:]):
        yield


def wants_pandas(workspace: str, spec: str) -> bool:
    """Does the target's folder read CSVs with pandas? Importing pandas costs a second; only then is it worth it."""
    where = spec.rsplit(":", 1)[0]
    folder = os.path.dirname(where if os.path.isabs(where) else os.path.join(workspace, where)) \
        if where.endswith(".py") else workspace
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".py")][:50]
    except OSError:
        return False
    for n in names:
        try:
            with open(os.path.join(folder, n), encoding="utf-8", errors="replace") as f:
                if "read_csv" in f.read(400_000):
                    return True
        except OSError:
            continue
    return False


def _rows_view(t: torch.Tensor, n: int) -> torch.Tensor | None:
    if t.dim() == 0 or t.shape[0] != n or t.numel() // n > 512:
        return None
    return t.detach().reshape(n, -1).float().cpu()


def _codes(v: torch.Tensor) -> tuple[torch.Tensor, int]:
    u, inv = torch.unique(v, return_inverse=True)
    return inv, len(u)


def purity(xc: torch.Tensor, nx: int, yc: torch.Tensor, ny: int) -> float:
    """Share of rows whose label is the most common one among the rows with their feature code."""
    table = torch.zeros(nx, ny)
    table.index_put_((xc, yc), torch.ones(len(xc)), accumulate=True)
    return float(table.max(1).values.sum() / len(xc))


def kept_labels(first: list, second: list, label: str) -> dict | None:
    """Compare the plain batches (first) with the coded ones (second). Each is a list of (path, tensor)
    lists, one per batch."""
    def gather(batches):
        cols: dict = {}
        for b in batches:
            for path, t in b:
                cols.setdefault(path, []).append(t.detach())
        return {p: torch.cat(ts) if len(ts) > 1 and all(t.shape[1:] == ts[0].shape[1:] for t in ts) else None
                for p, ts in cols.items()}

    a, b = gather(first), gather(second)
    ya, yb = a.get(label), b.get(label)
    if ya is None or yb is None or yb.dim() == 0:
        return None
    n = yb.shape[0]
    y = yb.reshape(n, -1)
    if y.shape[1] > 1:
        if not (y.sum(1) == 1).all():
            return None
        y = y.argmax(1, keepdim=True)
    yc, ny = _codes(y[:, 0].float())
    if ny < 2 or ny > CODES or n < 100:
        return None
    # a label of many values before and at most CODES now went through the coding; classes coded from a column
    # show it in their shares (coded skewed if they were balanced, balanced if skewed)
    if len(torch.unique(ya.float())) > CODES:
        reached = True
    else:
        before = torch.unique(ya.reshape(-1).float(), return_counts=True)[1].float()
        before = (before / before.sum()).tolist()
        now = (torch.bincount(yc).float() / n).tolist()
        want = expected_shares(before)
        reached = _tv(now, want) < 0.1 and _tv(now, want) < _tv(now, before) - 0.05
    gen = torch.Generator().manual_seed(0)
    best, worst = None, None
    coded = 0
    for path, xb in b.items():
        if path == label or xb is None or not xb.is_floating_point():
            continue
        xa = a.get(path)
        vb = _rows_view(xb, n)
        va = _rows_view(xa, xa.shape[0]) if xa is not None and xa.dim() > 0 else None
        if vb is None or va is None or va.shape[1] != vb.shape[1]:
            continue
        for j in range(vb.shape[1]):
            xc, nx = _codes(vb[:, j])
            if not (10 <= nx <= CODES) or len(torch.unique(va[:, j])) <= CODES:
                continue  # not a column the coding reached (it was not continuous before, or is not now)
            coded += 1
            p = purity(xc, nx, yc, ny)
            perm = [purity(xc, nx, yc[torch.randperm(n, generator=gen)], ny) for _ in range(3)]
            chance = sum(perm) / 3
            share = (p - chance) / max(1e-9, 1 - chance)
            if best is None or share > best["kept"]:
                best = {"kept": share, "purity": p, "chance": chance, "column": f"{path}[:, {j}]"}
            if worst is None or share < worst[0]:
                worst = (share, f"{path}[:, {j}]")
    if best is None:
        return {"coded_columns": 0, "rows": n}
    return {"coded_columns": coded, "rows": n, "label_values": ny, "label_coded": reached, **best,
            "least_kept": worst[0], "least_kept_column": worst[1]}
