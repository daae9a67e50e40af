"""Read torch's collective flight recorder dumps (one per rank) with torch's own analyser. Stdlib + torch.

args: {"files": {"<rank>": "<path of that rank's dump>"}}. The dumps are pickles; they are read with an
unpickler that only builds plain containers (a dump holds dicts, lists, tuples, strings and numbers), so a
planted file cannot run code. torch's `flight_recorder` components then match the collectives across
ranks (`build_db`), and we report the first mismatched collective plus each rank's last collective.
"""

import argparse
import io
import pickle

from mltriage_io import main

SAFE = {("builtins", "set"), ("builtins", "frozenset"), ("collections", "OrderedDict")}


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in SAFE:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing {module}.{name} in a flight recorder dump")


def _load(path: str) -> dict:
    with open(path, "rb") as f:
        return _PlainUnpickler(io.BytesIO(f.read())).load()


def _normalise_gloo(dump: dict) -> None:
    """torch 2.13's gloo records the default group as '' in pg_config while its entries name it ('0',
    'default_pg'), and the analyser then fails with KeyError ('0', rank): give the group its entries' name."""
    cfg = dump.get("pg_config") or {}
    for name, desc in {tuple(e.get("process_group") or ("", "")) for e in dump.get("entries", [])}:
        if name not in cfg and "" in cfg:
            c = cfg.pop("")
            cfg[name] = {**c, "name": name, "desc": c.get("desc") or desc}


def _frames(entry_frames) -> list[str]:
    return [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in (entry_frames or [])[:8]]


def run(job):
    details, version, last = {}, "", {}
    for rank, path in sorted(job.args["files"].items(), key=lambda kv: int(kv[0])):
        dump = _load(path)
        _normalise_gloo(dump)
        version = version or str(dump.get("version", ""))
        details[path] = {"host_name": f"host_rank{rank}", "rank": int(rank), "entries": dump.get("entries", []),
                         "version": dump.get("version"), "pg_config": dump.get("pg_config", {})}
        entries = dump.get("entries", [])
        e = entries[-1] if entries else {}
        last[int(rank)] = {"entries": len(entries), "pg_status": dump.get("pg_status"),
                           "last_op": e.get("profiling_name"), "last_seq": e.get("collective_seq_id"),
                           "last_state": e.get("state"), "last_sizes": e.get("input_sizes"),
                           "last_frames": _frames(e.get("frames"))}
    try:  # after the dumps are read: a refused file costs no torch import
        from torch.distributed.flight_recorder.components.builder import build_db
        from torch.distributed.flight_recorder.components.config_manager import JobConfig
    except ImportError as e:
        return {"available": False, "why": f"this torch has no flight recorder analyser ({e}); torch >= 2.5 has it"}
    args = JobConfig().parse_args(["unused", "--allow-incomplete-ranks"])
    db = build_db(details, args, version)
    mismatches = []
    for c in db.collectives:
        if c.pass_check:
            continue
        others = {int(r): {"op": m.collective_name, "input_sizes": m.input_sizes, "state": m.collective_state,
                           "frames": _frames(m.collective_frames)}
                  for r, m in (c.mismatch_collectives or {}).items()}
        mismatches.append({
            "seq": c.collective_seq_id, "op": c.collective_name, "input_sizes": c.input_sizes,
            "output_sizes": c.output_sizes, "state": c.collective_state, "expected_ranks": sorted(c.expected_ranks),
            "missing_ranks": sorted(c.missing_ranks or []), "mismatch_type": str(c.type_of_mismatch or ""),
            "frames": _frames(c.collective_frames), "ranks_with_other_op": others,
            "group": c.pg_desc or c.group_id})
    return {"available": True, "version": version, "ranks": sorted(last), "last": last,
            "matched": sum(1 for c in db.collectives if c.pass_check), "mismatches": mismatches[:10]}


if __name__ == "__main__":
    main(run)
