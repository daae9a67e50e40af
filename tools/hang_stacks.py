"""The odd rank of a hung distributed job, from every rank's Python stack.

When one rank skips, reorders or never reaches a collective, every other rank waits inside the same
collective at the same line, and the culprit is the one whose stack differs: waiting in another
collective, at another call site, or not in a collective at all. With identical stacks the call
count can still differ (one rank is one iteration ahead); py-spy's `--locals` shows it as an integer
local (the loop counter) that only one rank disagrees on.
"""

import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from pydantic import BaseModel, Field

from tools.live import LIBRARY_PATH, ChannelError, Frame, ThreadStack, py_spy_stacks
from tools.report import Evidence, Finding

# torch.distributed entry points a rank blocks in (distributed_c10d.py function names)
COLLECTIVES = {
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all", "all_to_all_single",
    "reduce", "reduce_scatter", "reduce_scatter_tensor", "broadcast", "broadcast_object_list", "scatter",
    "scatter_object_list", "gather", "gather_object", "barrier", "monitored_barrier", "send", "recv", "isend",
    "irecv", "batch_isend_irecv", "wait", "_all_gather_base", "_reduce_scatter_base", "all_reduce_coalesced",
}
DDP_BACKWARD = "backward (DDP gradient all-reduce)"
Kind = Literal["different_collective", "different_call_site", "not_in_collective", "different_call_count"]
SHOWN_FRAMES = 8


class RankStack(BaseModel):
    rank: int
    pid: int | None = None
    host: str | None = None
    frames: list[Frame] = Field(default_factory=list, description="main thread, innermost first")
    error: str | None = Field(None, description="why there is no stack (py-spy missing, no permission, exited)")


class StackGroup(BaseModel):
    ranks: list[int]
    collective: str | None = Field(None, description="the torch.distributed call they wait in; None = not in one")
    where: str | None = Field(None, description="innermost frame in the user's code")
    frames: list[str] = Field(default_factory=list, description="innermost first")


class OddRank(BaseModel):
    rank: int
    pid: int | None = None
    host: str | None = None
    kind: Kind
    collective: str | None = None
    where: str | None = None
    frames: list[str] = Field(default_factory=list)
    majority_ranks: list[int] = Field(default_factory=list)
    majority_collective: str | None = None
    majority_where: str | None = None
    majority_frames: list[str] = Field(default_factory=list)
    differing_locals: dict[str, str] = Field(default_factory=dict, description="local -> 'rank N: v; others: w'")


class HangStacks(BaseModel):
    job: str = Field(description="what ties the ranks together: torchrun run id, MASTER_ADDR:PORT, Slurm job")
    world_size: int | None = None
    ranks_seen: list[int] = Field(default_factory=list)
    groups: list[StackGroup] = Field(default_factory=list, description="ranks with identical main-thread stacks")
    odd: OddRank | None = None
    missing: dict[int, str] = Field(default_factory=dict, description="rank -> why its stack is missing")
    note: str = ""


def collective_of(frames: list[Frame]) -> str | None:
    """The torch.distributed call (or DDP's backward) the thread is blocked in, None when it is not in one."""
    for f in frames:
        if "torch/distributed/" in f.file and f.func.rsplit(".", 1)[-1] in COLLECTIVES:
            return f.func.rsplit(".", 1)[-1]
    if any("torch/autograd/" in f.file and f.func in ("backward", "_engine_run_backward") for f in frames):
        return DDP_BACKWARD if any("torch/nn/parallel/distributed" in f.file for f in frames) else "backward"
    return None


def user_frame(frames: list[Frame]) -> Frame | None:
    return next((f for f in frames if not LIBRARY_PATH.search(f.file)), None)


def _where(frames: list[Frame]) -> str | None:
    f = user_frame(frames)
    return f"{f.file}:{f.line} in {f.func}" if f else None


def _sig(frames: list[Frame]) -> tuple:
    return tuple((f.file, f.line, f.func) for f in frames)


def _show(frames: list[Frame]) -> list[str]:
    return [f"{f.file}:{f.line} in {f.func}" for f in frames[:SHOWN_FRAMES]]


def _int_local(v: str) -> int | None:
    return int(v) if re.fullmatch(r"-?\d+", v or "") else None


def _differing_locals(stacks: list[RankStack]) -> tuple[int | None, dict[str, str]]:
    """The one rank whose integer locals in its own code disagree with every other rank's (a loop counter)."""
    votes: Counter = Counter()
    diffs: dict[int, dict[str, str]] = {}
    depth = min(len(s.frames) for s in stacks)
    for i in range(depth):
        if LIBRARY_PATH.search(stacks[0].frames[i].file):
            continue
        names = set.intersection(*(set((s.frames[i].locals or {})) for s in stacks))
        for name in sorted(names):
            values = {s.rank: _int_local(s.frames[i].locals[name]) for s in stacks}
            if None in values.values():
                continue
            counts = Counter(values.values())
            if len(counts) != 2 or min(counts.values()) != 1 or len(stacks) < 3:
                continue
            lone = next(v for v, c in counts.items() if c == 1)
            rank = next(r for r, v in values.items() if v == lone)
            common = next(v for v, c in counts.items() if c > 1)
            votes[rank] += 1
            diffs.setdefault(rank, {})[f"{stacks[0].frames[i].func}.{name}"] = f"rank {rank}: {lone}; others: {common}"
    if len(votes) != 1:
        return None, {}
    rank = next(iter(votes))
    return rank, diffs[rank]


def analyse(job: str, stacks: list[RankStack], world_size: int | None = None) -> HangStacks:
    """Group the ranks by main-thread stack and name the odd one out, if exactly one stands out."""
    have = sorted((s for s in stacks if s.frames), key=lambda s: s.rank)
    out = HangStacks(job=job, world_size=world_size, ranks_seen=[s.rank for s in have],
                     missing={s.rank: s.error or "no frames" for s in stacks if not s.frames})
    by_sig: dict[tuple, list[RankStack]] = {}
    for s in have:
        by_sig.setdefault(_sig(s.frames), []).append(s)
    groups = sorted(by_sig.values(), key=lambda g: (-len(g), g[0].rank))
    out.groups = [StackGroup(ranks=[s.rank for s in g], collective=collective_of(g[0].frames),
                             where=_where(g[0].frames), frames=_show(g[0].frames)) for g in groups]
    if len(have) < 2:
        out.note = "fewer than two rank stacks: nothing to compare"
        return out
    if len(groups) == 1:
        rank, diffs = _differing_locals(have)
        if rank is None:
            out.note = ("every rank has the same stack and no loop counter tells them apart: the stacks alone do not "
                        "name a rank (the flight recorder's sequence numbers do: TORCH_FR_BUFFER_SIZE)")
            return out
        odd = next(s for s in have if s.rank == rank)
        g = out.groups[0]
        out.odd = OddRank(rank=rank, pid=odd.pid, host=odd.host, kind="different_call_count", collective=g.collective,
                          where=g.where, frames=g.frames, majority_ranks=[r for r in g.ranks if r != rank],
                          majority_collective=g.collective, majority_where=g.where, majority_frames=g.frames,
                          differing_locals=diffs)
        return out
    major, rest = groups[0], [s for g in groups[1:] for s in g]
    if len(major) == len(groups[1]):  # a tie (two ranks, or two even halves): who waits for whom?
        waiting = [g for g in groups if collective_of(g[0].frames)]
        outside = [g for g in groups if not collective_of(g[0].frames)]
        if len(outside) == 1 and len(outside[0]) == 1 and waiting:
            major, rest = max(waiting, key=len), outside[0]
        else:
            out.note = "the ranks split into equal groups; no single rank stands out"
            return out
    odd = sorted(rest, key=lambda s: (collective_of(s.frames) is not None, s.rank))[0]
    oc, mc = collective_of(odd.frames), collective_of(major[0].frames)
    if mc is None:
        out.note = "most ranks are not waiting in a collective: this looks like a running job, not a collective hang"
        return out
    kind: Kind = ("not_in_collective" if oc is None else "different_collective" if oc != mc else "different_call_site")
    out.odd = OddRank(rank=odd.rank, pid=odd.pid, host=odd.host, kind=kind, collective=oc, where=_where(odd.frames),
                      frames=_show(odd.frames), majority_ranks=[s.rank for s in major], majority_collective=mc,
                      majority_where=_where(major[0].frames), majority_frames=_show(major[0].frames))
    if len(rest) > 1:
        out.note = f"{len(rest)} ranks differ from the majority; rank {odd.rank} is named first"
    return out


WHY = {
    "not_in_collective": "is not in any collective while the others wait in {mc}",
    "different_collective": "waits in {oc} while the others wait in {mc}: the ranks issue different collectives",
    "different_call_site": "waits in {oc} at another line than the others' {mc}: a rank-dependent branch",
    "different_call_count": "is at another iteration of the same {mc} ({locals}): one rank skipped or added a call",
}


def hang_finding(h: HangStacks, idle: bool | None = None) -> Finding | None:
    o = h.odd
    if o is None:
        return None
    why = WHY[o.kind].format(oc=o.collective, mc=o.majority_collective, locals="; ".join(
        f"{k}: {v}" for k, v in o.differing_locals.items()))
    host = f" on {o.host}" if o.host else ""
    loc = o.where.split(" in ")[0] if o.where else None
    others = ", ".join(map(str, o.majority_ranks))
    ev = [Evidence(what=f"rank {o.rank} (pid {o.pid}{host}) innermost frame in user code", value=o.where,
                   source="py-spy dump"),
          Evidence(what=f"ranks {others} wait in", value=f"{o.majority_collective} at {o.majority_where}",
                   source="py-spy dump"),
          Evidence(what="stack groups", value="; ".join(f"ranks {g.ranks}: {g.collective or 'no collective'}"
                                                        for g in h.groups), source="py-spy dump")]
    ev += [Evidence(what=k, value=v, source="py-spy --locals") for k, v in o.differing_locals.items()]
    return Finding(
        failure_mode="hang", confidence=0.85 if idle is not False else 0.6,
        summary=f"rank {o.rank}{host} {why}", location=loc, evidence=ev,
        fix=(f"Look at {loc or 'rank ' + str(o.rank) + ''' code'''}: every rank must issue the same collectives in the "
             "same order with the same sizes (a rank-dependent `if`, uneven data shards, an early `break`, rank-0-only "
             "evaluation or checkpointing that calls a collective). Set timeout= in init_process_group so a hang "
             "raises, and TORCH_FR_BUFFER_SIZE=2000 to get the sequence number of the mismatched collective."))


def dump_ranks(ranks: dict[int, int], with_locals: bool = True, timeout: float = 5.0) -> list[RankStack]:
    """py-spy every rank (rank -> pid) in parallel; a rank whose dump fails keeps the reason."""
    def one(item):
        rank, pid = item
        try:
            stacks = py_spy_stacks(pid, rank, with_locals=with_locals, timeout=timeout)
        except ChannelError as e:
            return RankStack(rank=rank, pid=pid, error=str(e))
        main = next((s for s in stacks if s.main), None)
        return RankStack(rank=rank, pid=pid, frames=main.frames if main else [],
                         error=None if main else "no main thread in the dump")
    with ThreadPoolExecutor(max_workers=min(8, max(1, len(ranks)))) as pool:
        return list(pool.map(one, sorted(ranks.items())))


def stack_text(s: RankStack | ThreadStack) -> str:
    return "\n".join(f"  {f}" for f in s.frames[:40])
