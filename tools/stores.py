"""Metrics where users keep them: TensorBoard event files, W&B offline runs, MLflow's file store, Lightning's
CSVLogger, the HF Trainer's `trainer_state.json` and Trackio's SQLite store.

`detect(path)` names the format of a file or a run directory; `read(store)` yields its series as
(name, steps, values) chunks, the series model `tools/logs.py` builds from a text log, so the curve shapes,
train/validation pairing and LR checks work unchanged. The store's own library does the decoding
(TensorBoard's event loader, W&B's protobuf records, MLflow's FileStore), imported inside the call: the server
starts without them, and a missing one is a TriageError naming the extra to install.
"""

import csv
import io
import json
import math
import os
import re
import struct
import warnings
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tools import logfields
from tools.errors import TriageError
from tools.workspace import Workspace, open_regular, walk

Format = Literal["text", "tensorboard", "wandb", "mlflow", "lightning_csv", "hf_trainer", "trackio"]
Chunk = tuple[str, list, list[float]]

_FLUSH = 1 << 16  # points buffered across series before they go to the consumer: bounded memory on any run
_MAX_PARAMS = 200
_MAX_FILES = 100_000


@dataclass
class Store:
    format: Format
    path: Path  # the run: a directory, or the one file that holds it
    run: str  # its name as the store knows it (run id, run name, directory)
    files: list[Path] = field(default_factory=list)
    console_log: Path | None = None  # the run's captured stdout/stderr (W&B's files/output.log), for tail_log
    others: list[str] = field(default_factory=list)  # other runs found beside it, not read
    notes: list[str] = field(default_factory=list)
    key: str | None = None  # what selects the run inside a shared file (Trackio's run)
    mtime: float = 0.0

    @property
    def file(self) -> Path:
        return self.files[0]


def _missing(package: str, what: str) -> TriageError:
    return TriageError(f"reading {what} needs the `{package}` package, which is not installed where the server runs",
                       f'pip install "mltriage[{package}]" in the server\'s environment (or `uvx --with {package} '
                       f'mltriage serve`), then call again')


def resolve_log(ws: Workspace, path: str) -> Path:
    """A log file or a run directory inside the read roots."""
    p = ws.read_path(path)
    return p if p.is_dir() else ws.existing_file(path)


# --------------------------------------------------------------------------- which format, which run

_TB = re.compile(r"events\.out\.tfevents\.")
_CHECKPOINT = re.compile(r"checkpoint-(\d+)$")


def _db_format(path: Path) -> Format | None:
    """trackio or mlflow (MLflow 3's default `mlflow.db`) for a SQLite file of theirs, else None."""
    if path.suffix not in (".db", ".sqlite", ".sqlite3"):
        return None
    import sqlite3
    try:
        with _sqlite(path) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")} if "metrics" in tables else set()
    except sqlite3.Error:
        return None
    if {"runs", "experiments"} <= tables and "run_uuid" in cols:
        return "mlflow"
    return "trackio" if "run_name" in cols else None


def _csv_header(path: Path) -> list[str]:
    with open_regular(path) as f:
        return next(csv.reader([f.readline(65536).decode("utf-8", "replace")]), [])


def _file_format(path: Path) -> Format:
    name = path.name
    if _TB.match(name):
        return "tensorboard"
    if name.endswith(".wandb"):
        return "wandb"
    if name == "trainer_state.json":
        return "hf_trainer"
    if name == "metrics.csv" and "step" in _csv_header(path):
        return "lightning_csv"
    return _db_format(path) or "text"


def _mtime(files: list[Path]) -> float:
    return max((os.stat(f).st_mtime for f in files), default=0.0)


def _candidates(top: Path, files: list[Path]) -> dict[Format, list[Store]]:
    """Every run under `top`, per format."""
    out: dict[Format, list[Store]] = {}

    def rel(d: Path) -> str:
        return d.name if d == top else str(d.relative_to(top))

    tb = [f for f in files if _TB.match(f.name)]
    if tb:
        dirs = sorted({f.parent for f in tb}, key=lambda d: len(d.parts))
        roots: list[Path] = []
        for d in dirs:  # add_scalars writes each of its series to a sub-directory of the run
            if not any(d == r or d.is_relative_to(r) for r in roots):
                roots.append(d)
        out["tensorboard"] = [Store("tensorboard", r, rel(r), sorted((f for f in tb if f.is_relative_to(r)), key=_tb_order))
                              for r in roots]
    wb = [f for f in files if f.suffix == ".wandb"]
    out["wandb"] = [Store("wandb", f.parent, _wandb_name(f), [f],
                          console_log=next((c for c in files if c == f.parent / "files" / "output.log"), None))
                    for f in wb]
    for f in files:  # W&B runs synced and cleaned, or from a version that kept JSON-lines history
        if f.name == "wandb-history.jsonl" and not any(s.path == f.parent.parent for s in out["wandb"]):
            out["wandb"].append(Store("wandb", f.parent.parent, f.parent.parent.name, [f]))
    ml = {f.parent for f in files if f.name == "meta.yaml" and (f.parent / "metrics").is_dir()}
    out["mlflow"] = [Store("mlflow", d, _mlflow_name(d), [f for f in files if f.is_relative_to(d)]) for d in sorted(ml)]
    out["lightning_csv"] = [Store("lightning_csv", f.parent, rel(f.parent), [f]) for f in files
                            if f.name == "metrics.csv" and "step" in _csv_header(f)]
    hf: dict[Path, list[Path]] = {}
    for f in files:
        if f.name == "trainer_state.json":
            run = f.parent.parent if _CHECKPOINT.match(f.parent.name) else f.parent
            hf.setdefault(run, []).append(f)
    out["hf_trainer"] = [Store("hf_trainer", d, rel(d), [max(fs, key=_hf_order)]) for d, fs in hf.items()]
    dbs = [(f, _db_format(f)) for f in files if f.suffix in (".db", ".sqlite", ".sqlite3")]
    out["trackio"] = [s for f, fmt in dbs if fmt == "trackio" for s in _trackio_runs(f)]
    out["mlflow"] += [s for f, fmt in dbs if fmt == "mlflow" for s in _mlflow_db_runs(f)]
    for group in out.values():
        for s in group:
            s.mtime = s.mtime or _mtime(s.files)
    return {k: v for k, v in out.items() if v}


def _tb_order(f: Path) -> tuple:
    # events.out.tfevents.<unix time>.<host>.<pid>.<n>: a resumed run's files in the order they were written
    parts = f.name.split(".")
    t = parts[3] if len(parts) > 3 and parts[3].isdigit() else "0"
    return (len(f.parent.parts), str(f.parent), int(t), f.name)


def _hf_order(f: Path) -> tuple:
    m = _CHECKPOINT.match(f.parent.name)
    return (m is None, int(m.group(1)) if m else 0)  # the output dir's own file (end of training) beats checkpoints


def _wandb_name(f: Path) -> str:
    m = re.match(r"run-(\w+)\.wandb$", f.name)
    return m.group(1) if m else f.parent.name


# most specific first: a W&B run synced from TensorBoard, a Lightning run with hparams and CSV, ...
_PRIORITY: tuple[Format, ...] = ("wandb", "tensorboard", "mlflow", "trackio", "lightning_csv", "hf_trainer")


def runs(path: Path) -> tuple[Format, list[Store]]:
    """Every run of the dominant format under a directory, or the one file; ("text", []) for a plain log."""
    if not path.is_dir():
        fmt = _file_format(path)
        if fmt == "trackio":
            return fmt, _trackio_runs(path)
        if fmt == "mlflow":
            return fmt, _mlflow_db_runs(path)
        if fmt == "text":
            return fmt, []
        return fmt, [Store(fmt, path, path.stem if fmt != "wandb" else _wandb_name(path), [path],
                           mtime=_mtime([path]))]
    files = walk(path)[:_MAX_FILES]
    found = _candidates(path, files)
    for fmt in _PRIORITY:
        if fmt in found:
            chosen = found[fmt]
            rest = [f"{k} ({len(v)} run(s))" for k, v in found.items() if k != fmt]
            for s in chosen if rest else ():
                s.notes.append("also found here: " + ", ".join(rest) + "; read as " + fmt)
            return fmt, chosen
    raise TriageError(f"{path.name or path} is a directory with no metrics store in it (TensorBoard event files, a W&B "
                      "run, MLflow's mlruns, Lightning's metrics.csv, trainer_state.json, a Trackio .db)",
                      "Pass the log file inside it, or the run directory the logger wrote")


def detect(path: Path, run: str | None = None) -> Store | None:
    """The store at `path` (a file or a run directory), the run `run` names inside it (default: the most recent);
    None for a plain text log file."""
    fmt, found = runs(path)
    if fmt == "text":
        return None
    if not found:
        raise TriageError(f"{path.name} holds no runs", "Pass a run that logged metrics")
    if run:
        hit = [s for s in found if run in (s.run, s.path.name, s.key)] or \
              [s for s in found if run.lower() in f"{s.run} {s.path}".lower()]
        if not hit:
            raise TriageError(f"no run {run!r} in {path.name}", "Pass run= one of: " + ", ".join(s.run for s in found[:30]))
        found = hit
    found.sort(key=lambda s: s.mtime)
    store = found[-1]
    if len(found) > 1:
        store.others = [s.run for s in found[:-1]][-20:]
        store.notes.append(f"{len(found)} {fmt} runs here; read the most recent, {store.run!r} "
                           f"(others: {', '.join(store.others[-5:])}); pass run= to pick another")
    return store


# --------------------------------------------------------------------------- reading

class _Buffer:
    """Points per series, handed on in chunks so a million-step run never sits in memory as lists."""

    def __init__(self):
        self.by: dict[str, tuple[list, list]] = {}
        self.n = 0

    def add(self, key: str, step, value: float) -> None:
        b = self.by.get(key)
        if b is None:
            b = self.by[key] = ([], [])
        b[0].append(step)
        b[1].append(value)
        self.n += 1

    def column(self, key: str) -> tuple[list, list]:
        """The (steps, values) lists of `key` until the next drain, for a caller appending to them itself."""
        b = self.by.get(key)
        if b is None:
            b = self.by[key] = ([], [])
        return b

    def full(self) -> bool:
        return self.n >= _FLUSH

    def drain(self) -> Iterator[Chunk]:
        by, self.by, self.n = self.by, {}, 0
        for k, (s, v) in by.items():
            yield k, s, v


def read(store: Store, wanted: Callable[[str], bool] = lambda k: True,
         tick: Callable[[], None] | None = None) -> Iterator[Chunk]:
    """The store's series as (name, steps, values) chunks in logging order; `tick` is called between chunks (it may
    raise to cancel)."""
    reader = {"tensorboard": _tensorboard, "wandb": _wandb, "mlflow": _mlflow, "trackio": _trackio,
              "lightning_csv": _lightning, "hf_trainer": _hf_trainer}[store.format]
    for chunk in reader(store, wanted):
        if chunk[1]:
            yield chunk
        if tick:
            tick()


def params(store: Store) -> dict[str, str]:
    """The run's configuration as the store keeps it (W&B config, MLflow params, Lightning's hparams.yaml,
    Trackio's config), flattened to `a.b -> value` strings."""
    import sqlite3
    try:
        got = {"wandb": _wandb_params, "mlflow": _mlflow_params, "trackio": _trackio_params}.get(
            store.format, _hparams_yaml)(store)
    except (OSError, ValueError, sqlite3.Error):
        return {}
    return dict(list(got.items())[:_MAX_PARAMS])


def _flat(obj, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
    elif prefix:
        out[prefix[:-1]] = obj if isinstance(obj, str) else json.dumps(obj)
    return out


# -- TensorBoard

def _tensorboard(store: Store, wanted) -> Iterator[Chunk]:
    try:
        from tensorboard.backend.event_processing.event_file_loader import LegacyEventFileLoader
    except ImportError:
        raise _missing("tensorboard", "TensorBoard event files") from None
    buf = _Buffer()
    make_ndarray = None
    for f in store.files:
        rel = f.parent.relative_to(store.path) if f.parent != store.path and f.parent.is_relative_to(store.path) else None
        prefix = f"{rel}/" if rel else ""
        cols: dict[str, tuple[list, list] | None] = {}  # tag -> its buffer lists (None: not wanted)
        n = 0
        # the legacy loader yields events as written: the newer one first rewrites every scalar as a tensor
        for ev in LegacyEventFileLoader(str(f)).Load():
            for v in ev.summary.value:  # empty for the events that are no summary
                which = v.WhichOneof("value")
                if which == "simple_value":
                    x = v.simple_value
                elif which == "tensor" and not v.tensor.tensor_shape.dim:  # tf.summary.scalar of TF2, tensorboardX
                    if make_ndarray is None:
                        from tensorboard.util.tensor_util import make_ndarray
                    try:
                        x = float(make_ndarray(v.tensor))
                    except (TypeError, ValueError):
                        continue
                else:
                    continue
                tag = v.tag
                col = cols.get(tag, False)
                if col is False:
                    col = cols[tag] = buf.column(prefix + tag) if wanted(prefix + tag) else None
                if col is not None:
                    col[0].append(ev.step)
                    col[1].append(x)
                    n += 1
            if n >= _FLUSH:
                yield from buf.drain()
                cols.clear()
                n = 0
        yield from buf.drain()


# -- Weights & Biases

_LOG_BLOCK = 32768
_LOG_HEADER = struct.Struct("<IHB")
_WANDB_IDENT = b":W&B"
_BLOCKS = 32  # 1 MiB reads


def wandb_records(path: Path) -> Iterator[bytes]:
    """The records of a `.wandb` transaction log: LevelDB's log format (32 KiB blocks of CRC-checked fragments
    behind a `:W&B` header). wandb >= 0.2x reads it only in its Go core, so the framing is read here and each
    record is decoded with wandb's own protobuf `Record`. Read a few blocks at a time (a million-step run's log
    is ~300 MB); a torn last record (a run still writing) ends the scan."""
    crc = [zlib.crc32(bytes([t])) for t in range(5)]
    parts: list[bytes] = []
    with open_regular(path) as f:
        data = f.read(_LOG_BLOCK * _BLOCKS)
        if data[:4] != _WANDB_IDENT:
            raise TriageError(f"{path.name} is not a W&B transaction log (no :W&B header)",
                              "Pass the run's run-<id>.wandb file or its directory")
        pos = 7
        while data:
            n = len(data)
            while pos + 7 <= n:  # fragments never cross a block, so never a read either: reads are whole blocks
                left = _LOG_BLOCK - pos % _LOG_BLOCK
                if left < 7:
                    pos += left  # block trailer
                    continue
                checksum, length, kind = _LOG_HEADER.unpack_from(data, pos)
                start, pos = pos + 7, pos + 7 + length
                if kind == 0 or kind > 4 or pos > n:
                    return  # zero padding of a preallocated block, or a record cut short
                frag = data[start:pos]
                if zlib.crc32(frag, crc[kind]) != checksum:
                    return
                if kind == 1:
                    yield frag
                elif kind == 2:
                    parts = [frag]
                elif parts:
                    parts.append(frag)
                    if kind == 4:
                        yield b"".join(parts)
                        parts = []
            if n < _LOG_BLOCK * _BLOCKS:
                return
            data, pos = f.read(_LOG_BLOCK * _BLOCKS), 0


def _wandb_pb():
    try:
        from wandb.proto import wandb_internal_pb2
    except ImportError:
        raise _missing("wandb", "W&B run files") from None
    return wandb_internal_pb2


_EPOCH_RANK = logfields.STEP_KEYS.index("epoch")


def _wandb(store: Store, wanted) -> Iterator[Chunk]:
    if store.file.suffix == ".jsonl":
        yield from _wandb_jsonl(store, wanted)
        return
    parse = _wandb_pb().Record.FromString
    buf = _Buffer()
    step_key: str | None = None  # the user's own step (Lightning's trainer/global_step) beats W&B's `_step`
    for data in wandb_records(store.file):
        # a fresh message each time: upb keeps what a reused one parsed in its arena (2 GB over a million steps)
        rec = parse(data)
        if rec.WhichOneof("record_type") != "history":
            continue
        items = [("/".join(it.nested_key) if it.nested_key else it.key, it.value_json) for it in rec.history.item]
        if step_key is None:
            ranked = [(r, k) for k, _ in items if not k.startswith("_") and (r := logfields.step_rank(k)) is not None
                      and r < _EPOCH_RANK]
            step_key = min(ranked)[1] if ranked else "_step"
        step = next((v for k, v in items if k == step_key), None)
        if step is None:
            step = next((v for k, v in items if k == "_step"), rec.history.step.num)
        try:
            step = int(step)
        except ValueError:
            step = float(step)
        for k, v in items:
            if k[:1] == "_" or k == step_key or not wanted(k):
                continue
            try:
                x = float(v)  # "NaN", "Infinity" included; a table, an image or a string is not a series
            except ValueError:
                continue
            buf.add(k, step, x)
        if buf.full():
            yield from buf.drain()
    yield from buf.drain()


def _wandb_jsonl(store: Store, wanted) -> Iterator[Chunk]:
    buf = _Buffer()
    with open_regular(store.file) as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                continue
            step = row.get("_step", buf.n)
            for k, v in row.items():
                if k[:1] != "_" and isinstance(v, (int, float)) and not isinstance(v, bool) and wanted(k):
                    buf.add(k, step, float(v))
            if buf.full():
                yield from buf.drain()
    yield from buf.drain()


def _wandb_params(store: Store) -> dict[str, str]:
    cfg = store.path / "files" / "config.yaml"
    out: dict[str, str] = {}
    if store.file.suffix == ".wandb":
        parse = _wandb_pb().Record.FromString
        for data in wandb_records(store.file):
            rec = parse(data)
            which = rec.WhichOneof("record_type")
            updates = rec.config.update if which == "config" else rec.run.config.update if which == "run" else None
            for u in updates or ():
                key = "/".join(u.nested_key) if u.nested_key else u.key
                if not key.startswith("_"):
                    out.update(_flat(json.loads(u.value_json), key + ".") or {key: u.value_json})
            if which == "history":
                break  # the config is written before the first step
    elif cfg.is_file():
        out.update(_hparams_yaml(store, cfg))
    return {k.removesuffix(".value"): v for k, v in out.items()}


# -- MLflow

def _mlflow_db_runs(path: Path) -> list[Store]:
    import sqlite3
    try:
        with _sqlite(path) as db:
            rows = db.execute("SELECT run_uuid, name, start_time FROM runs WHERE lifecycle_stage != 'deleted'").fetchall()
    except sqlite3.Error as e:
        raise TriageError(f"{path.name} cannot be read as an MLflow database ({e})", "Pass the mlflow.db file") from None
    return [Store("mlflow", path, f"{name} ({uuid})" if name else uuid, [path], key=uuid, mtime=(start or 0) / 1000)
            for uuid, name, start in rows]


def _mlflow_db(store: Store, wanted) -> Iterator[Chunk]:
    """MLflow's SQLite store, read-only through its tables (mlflow-skinny has no SQL store of its own): NaN is kept
    as 0 with `is_nan` set, +-inf as +-float max."""
    buf = _Buffer()
    with _sqlite(store.file) as db:
        rows = db.execute("SELECT key, step, value, is_nan FROM metrics WHERE run_uuid = ? ORDER BY key, timestamp, step",
                          (store.key,))
        for key, step, value, is_nan in rows:
            if wanted(key):
                x = math.nan if is_nan else math.copysign(math.inf, value) if abs(value) == _FLOAT_MAX else value
                buf.add(key, step, x)
            if buf.full():
                yield from buf.drain()
    yield from buf.drain()


_FLOAT_MAX = 1.7976931348623157e308


def _mlflow(store: Store, wanted) -> Iterator[Chunk]:
    if store.key is not None:
        yield from _mlflow_db(store, wanted)
        return
    hist = _mlflow_lib(store)
    keys = sorted(str(f.relative_to(store.path / "metrics")) for f in store.files if f.is_relative_to(store.path / "metrics"))
    for key in keys:
        if not wanted(key):
            continue
        if hist is not None:
            ms = hist(key)
            yield key, [m.step for m in ms], [float(m.value) for m in ms]
            continue
        steps, vals = [], []
        with open_regular(store.path / "metrics" / key) as f:
            for line in f:  # `<timestamp ms> <value> <step>` (no step before MLflow 1.0)
                parts = line.split()
                if len(parts) >= 2:
                    vals.append(float(parts[1]))
                    steps.append(int(parts[2]) if len(parts) > 2 else len(steps))
        yield key, steps, vals


def _mlflow_lib(store: Store):
    """MLflow's own FileStore reader of this run's metric histories, or None where mlflow is not installed (the
    plain-file layout is read then)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from mlflow.store.tracking.file_store import FileStore
            fs = FileStore(str(store.path.parent.parent))
            run_id = store.path.name
            fs.get_run(run_id)
    except Exception:  # not installed, or a layout it will not open: the files are plain text
        return None
    return lambda key: fs.get_metric_history(run_id, key)


def _mlflow_params(store: Store) -> dict[str, str]:
    out = {}
    if store.key is not None:  # mlflow.db
        with _sqlite(store.file) as db:
            for table, prefix in (("params", ""), ("tags", "tags.")):
                for k, v in db.execute(f"SELECT key, value FROM {table} WHERE run_uuid = ?", (store.key,)):
                    out[prefix + k] = v
        return out
    for sub in ("params", "tags"):
        d = store.path / sub
        for f in store.files:
            if f.is_relative_to(d):
                with open_regular(f) as fh:
                    out[(f"{sub}." if sub == "tags" else "") + str(f.relative_to(d))] = fh.read(4096).decode("utf-8", "replace").strip()
    return out


def _mlflow_name(run_dir: Path) -> str:
    """`<run name> (<run id>)`: `run=` matches either."""
    tag = run_dir / "tags" / "mlflow.runName"
    try:
        with open_regular(tag) as f:
            name = f.read(1024).decode("utf-8", "replace").strip()
    except TriageError:
        return run_dir.name
    return f"{name} ({run_dir.name})" if name else run_dir.name


# -- Lightning, HF Trainer

def _number(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        return float(v)
    except ValueError:
        return None


def _step_of(v):
    x = _number(v)
    return None if x is None or not math.isfinite(x) else int(x) if x.is_integer() else x


def _lightning(store: Store, wanted) -> Iterator[Chunk]:
    """CSVLogger's metrics.csv: one row per `log` call, train and validation rows interleaved, the cells a row
    did not log left empty (missing, not NaN)."""
    buf = _Buffer()
    with open_regular(store.file) as f:
        rows = csv.reader(io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline=""))
        header = next(rows, [])
        si = header.index("step")
        keep = [(i, k) for i, k in enumerate(header) if i != si and wanted(k)]
        for row in rows:
            if len(row) != len(header) or (step := _step_of(row[si])) is None:
                continue
            for i, k in keep:
                if row[i] and (x := _number(row[i])) is not None:
                    buf.add(k, step, x)
            if buf.full():
                yield from buf.drain()
    yield from buf.drain()


def _hf_trainer(store: Store, wanted) -> Iterator[Chunk]:
    """`log_history` of trainer_state.json: training records (loss, grad_norm, learning_rate) and evaluation
    records (eval_loss, ...) at their global step."""
    with open_regular(store.file) as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            raise TriageError(f"{store.file.name} is not valid JSON ({e})", "Pass a complete trainer_state.json") from None
    buf = _Buffer()
    for r in doc.get("log_history", []) if isinstance(doc, dict) else []:
        if not isinstance(r, dict) or (step := _step_of(r.get("step"))) is None:
            continue
        for k, v in r.items():
            if k != "step" and (x := _number(v)) is not None and wanted(k):
                buf.add(k, step, x)
    yield from buf.drain()


def _hparams_yaml(store: Store, path: Path | None = None) -> dict[str, str]:
    path = path or store.path / "hparams.yaml"
    if not path.is_file():
        return {}
    with open_regular(path) as f:
        text = f.read(1 << 20).decode("utf-8", "replace")
    try:
        import yaml
        return _flat(yaml.safe_load(text) or {})
    except ImportError:  # one `key: value` a line covers what loggers write
        return {m[1]: m[2].strip() for m in re.finditer(r"(?m)^([\w.\-/]+):[ \t]+(\S.*)$", text)}
    except Exception:
        return {}


# -- Trackio

def _sqlite(path: Path):
    import sqlite3  # only for a .db: the server starts without it
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


def _trackio_runs(path: Path) -> list[Store]:
    import sqlite3
    try:
        with _sqlite(path) as db:
            cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")}
            by = "run_id" if "run_id" in cols else "run_name"
            rows = db.execute(f"SELECT {by}, MAX(run_name), MAX(timestamp) FROM metrics GROUP BY {by}").fetchall()
    except sqlite3.Error as e:
        raise TriageError(f"{path.name} cannot be read as a Trackio store ({e})", "Pass the project's .db file") from None
    out = []
    for key, name, ts in rows:
        s = Store("trackio", path, name, [path], key=key)
        s.mtime = _iso_time(ts)
        out.append(s)
    return out


def _iso_time(ts: str | None) -> float:
    from datetime import datetime
    try:
        return datetime.fromisoformat(ts).timestamp() if ts else 0.0
    except ValueError:
        return 0.0


def _trackio(store: Store, wanted) -> Iterator[Chunk]:
    buf = _Buffer()
    with _sqlite(store.file) as db:
        cols = {r[1] for r in db.execute("PRAGMA table_info(metrics)")}
        by = "run_id" if "run_id" in cols else "run_name"
        for step, blob in db.execute(f"SELECT step, metrics FROM metrics WHERE {by} = ? ORDER BY id", (store.key,)):
            try:
                row = json.loads(blob)
            except ValueError:
                continue
            for k, v in row.items():
                if k[:1] == "_" or isinstance(v, bool) or not wanted(k):
                    continue
                if isinstance(v, (int, float)) or v in ("NaN", "Infinity", "-Infinity"):
                    buf.add(k, step, float(v))
            if buf.full():
                yield from buf.drain()
    yield from buf.drain()


def _trackio_params(store: Store) -> dict[str, str]:
    with _sqlite(store.file) as db:
        if db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='configs'").fetchone() is None:
            return {}
        cols = {r[1] for r in db.execute("PRAGMA table_info(configs)")}
        by = "run_id" if "run_id" in cols else "run_name"
        row = db.execute(f"SELECT config FROM configs WHERE {by} = ?", (store.key,)).fetchone()
    return {k: v for k, v in _flat(json.loads(row[0]) if row else {}).items() if not k.startswith("_")}


def last_values(store: Store) -> dict[str, float]:
    """The last value of every series of a run (NaN kept: a diverged run), for a sweep's table; a W&B run's own
    summary (`files/wandb-summary.json`: what `run.summary[...]` set, e.g. a best value) overrides it."""
    out: dict[str, float] = {}
    for key, _steps, vals in read(store):
        out[key] = vals[-1]
    summary = store.path / "files" / "wandb-summary.json"
    if store.format == "wandb" and summary.is_file():
        try:
            with open_regular(summary) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            doc = {}
        for k, v in _flat(doc if isinstance(doc, dict) else {}).items():
            if not k.startswith("_") and (x := _number(v)) is not None:
                out[k] = x
    return out
