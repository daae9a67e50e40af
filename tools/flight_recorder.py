"""torch's collective flight recorder: where each rank's dump is, and what torch's own analyser says about it.

With `TORCH_FR_BUFFER_SIZE` (or the older `TORCH_NCCL_TRACE_BUFFER_SIZE`) above 0 every process group keeps
a ring buffer of its last collectives (op, sequence number, sizes, state, Python stack). NCCL writes it
to `<TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE><rank>` (default `/tmp/nccl_trace_rank_<rank>`)
when its watchdog times out; gloo records too but writes no file by itself (torch 2.13), so for gloo the
dump comes from our live instrument or from the user's own call to `_dump_fr_trace()`. The analysis runs
in the user's interpreter (the server never imports torch): tools/probe/mltriage_flight_recorder.py.
"""

from pathlib import Path

from pydantic import BaseModel, Field

from tools.errors import TriageError
from tools.probe_runner import run_probe
from tools.report import Evidence, Finding

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FILE_VARS = ("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
DEFAULT_PREFIX = "/tmp/nccl_trace_rank_"


class RankLastCollective(BaseModel):
    rank: int
    entries: int
    last_op: str | None = None
    last_seq: int | None = None
    last_state: str | None = None
    last_sizes: list | None = None
    last_enqueued: int | None = Field(None, description="pg_status of the default group: collectives issued")
    last_completed: int | None = None
    where: str | None = Field(None, description="the user's frame that issued the last collective")


class Mismatch(BaseModel):
    seq: int = Field(description="collective sequence number in the process group")
    op: str
    input_sizes: list = Field(default_factory=list)
    group: str = ""
    ranks: list[int] = Field(default_factory=list, description="ranks that issued `op`")
    other: dict[str, list[int]] = Field(default_factory=dict, description="'op sizes' -> ranks that issued it instead")
    missing_ranks: list[int] = Field(default_factory=list)
    odd_ranks: list[int] = Field(default_factory=list, description="the minority: the rank(s) out of step")
    mismatch_type: str = ""
    frames: list[str] = Field(default_factory=list)


class FlightRecorder(BaseModel):
    enabled: bool
    files: dict[int, str] = Field(default_factory=dict)
    missing_files: dict[int, str] = Field(default_factory=dict)
    analysed: bool = False
    why_not: str | None = None
    matched: int | None = Field(None, description="collectives that matched on every rank")
    mismatches: list[Mismatch] = Field(default_factory=list)
    last: list[RankLastCollective] = Field(default_factory=list)
    behind: list[int] = Field(default_factory=list, description="ranks that issued fewer collectives than the others")


def enabled(env: dict[str, str]) -> bool:
    return any(env.get(v, "0").strip().isdigit() and int(env[v]) > 0 for v in BUFFER_VARS if v in env)


def dump_prefix(env: dict[str, str]) -> str:
    return next((env[v] for v in FILE_VARS if env.get(v)), DEFAULT_PREFIX)


def dump_files(env_by_rank: dict[int, dict[str, str]]) -> tuple[dict[int, Path], dict[int, str]]:
    """(rank -> existing dump file, rank -> where it was looked for) from each rank's environment."""
    found, missing = {}, {}
    for rank, env in sorted(env_by_rank.items()):
        path = Path(dump_prefix(env) + str(rank))
        if path.is_file():
            found[rank] = path
        else:
            missing[rank] = str(path)
    return found, missing


def _minority(groups: dict[str, list[int]]) -> list[int]:
    if len(groups) < 2:
        return []
    ordered = sorted(groups.values(), key=len)
    return ordered[0] if len(ordered[0]) < len(ordered[-1]) else []


def shape(raw: dict) -> FlightRecorder:
    """The probe's answer as our report: mismatches with the odd ranks named, and who is behind."""
    from tools.live import LIBRARY_PATH  # tools.live imports this module
    fr = FlightRecorder(enabled=True, analysed=bool(raw.get("available")), why_not=raw.get("why"),
                        matched=raw.get("matched"))
    for rank, last in sorted(raw.get("last", {}).items(), key=lambda kv: int(kv[0])):
        status = next(iter((last.get("pg_status") or {}).values()), {}) or {}
        user = next((f for f in last.get("last_frames", []) if not LIBRARY_PATH.search(f.split(":")[0])), None)
        fr.last.append(RankLastCollective(rank=int(rank), entries=last.get("entries", 0), last_op=last.get("last_op"),
                                          last_seq=last.get("last_seq"), last_state=last.get("last_state"),
                                          last_sizes=last.get("last_sizes"), where=user,
                                          last_enqueued=status.get("last_enqueued_collective"),
                                          last_completed=status.get("last_completed_collective")))
    issued = {r.rank: r.last_enqueued if r.last_enqueued is not None else r.last_seq for r in fr.last}
    if len(set(v for v in issued.values() if v is not None)) > 1:
        top = max(v for v in issued.values() if v is not None)
        fr.behind = [r for r, v in issued.items() if v is not None and v < top]
    for m in raw.get("mismatches", []):
        other: dict[str, list[int]] = {}
        for r, o in m.get("ranks_with_other_op", {}).items():
            other.setdefault(f"{o['op']} {o['input_sizes']}", []).append(int(r))
        shown = {int(r) for rs in other.values() for r in rs} | set(m.get("missing_ranks", []))
        ranks = [r for r in m.get("expected_ranks", []) if r not in shown]
        groups = {f"{m['op']} {m.get('input_sizes')}": ranks, **other}
        fr.mismatches.append(Mismatch(seq=m["seq"], op=m["op"], input_sizes=m.get("input_sizes") or [],
                                      group=str(m.get("group", "")), ranks=ranks, other=other,
                                      missing_ranks=m.get("missing_ranks", []), odd_ranks=_minority(groups),
                                      mismatch_type=m.get("mismatch_type", "")[:500], frames=m.get("frames", [])))
    return fr


async def analyse_dumps(files: dict[int, Path], *, workspace_root: Path, python: str | None,
                        timeout_s: float = 60.0) -> FlightRecorder:
    outcome = await run_probe("mltriage_flight_recorder.py", {"files": {str(r): str(p) for r, p in files.items()}},
                              workspace_root=workspace_root, python=python, timeout_s=timeout_s)
    if outcome.result is None:
        raise TriageError(f"reading the flight recorder dumps failed: {outcome.failure()}",
                          f"stderr: {outcome.stderr_tail[-1500:]}")
    if not outcome.result.get("ok"):
        err = outcome.result["error"]
        return FlightRecorder(enabled=True, files={r: str(p) for r, p in files.items()},
                              why_not=f"torch's analyser failed: {err['type']}: {err['message'][:600]}")
    fr = shape(outcome.result["report"])
    fr.files = {r: str(p) for r, p in files.items()}
    return fr


def fr_finding(fr: FlightRecorder, where: dict[int, str] | None = None) -> Finding | None:
    """`where`: rank -> its user frame from the stacks, for dumps taken without stack traces."""
    where = where or {}

    def loc_of(rank: int) -> str | None:
        rec = next((r for r in fr.last if r.rank == rank), None)
        w = (rec.where if rec and rec.where else None) or where.get(rank)
        return w.split(" in ")[0] if w else None

    m = next((m for m in fr.mismatches if m.odd_ranks), None)
    if m is not None:
        odd = ", ".join(map(str, m.odd_ranks))
        theirs = next((k for k, rs in {f"{m.op} {m.input_sizes}": m.ranks, **m.other}.items()
                       if set(rs) == set(m.odd_ranks)), "?")
        majority = next((k for k, rs in {f"{m.op} {m.input_sizes}": m.ranks, **m.other}.items()
                         if set(rs) != set(m.odd_ranks)), "?")
        return Finding(
            failure_mode="hang", confidence=0.9,
            summary=f"flight recorder: collective #{m.seq} does not match: rank(s) {odd} issued {theirs} "
                    f"while the others issued {majority}",
            location=loc_of(m.odd_ranks[0]),
            evidence=[Evidence(what="mismatched collective sequence number", value=m.seq, source="torch flight recorder"),
                      Evidence(what=f"ranks {m.ranks}", value=f"{m.op} {m.input_sizes}", source="torch flight recorder"),
                      *[Evidence(what=f"ranks {rs}", value=k, source="torch flight recorder") for k, rs in m.other.items()],
                      *([Evidence(what="torch's analyser", value=m.mismatch_type[:300], source="flight_recorder.build_db")]
                        if m.mismatch_type else [])],
            fix="Make every rank issue the same sequence of collectives (same op, same sizes, same order): look at "
                "the odd rank's frame for a rank-dependent branch or an uneven number of batches.")
    if fr.behind:
        behind = ", ".join(map(str, fr.behind))
        return Finding(
            failure_mode="hang", confidence=0.8,
            summary=f"flight recorder: rank(s) {behind} issued fewer collectives than the others",
            location=loc_of(fr.behind[0]),
            evidence=[Evidence(what=f"rank {r.rank} collectives issued", value=r.last_enqueued, source="pg_status")
                      for r in fr.last],
            fix="The rank that is behind skipped a collective or is stuck before it: look at its stack.")
    return None
