"""The slow rank of a synchronous job, from the live instrument's per-step records of every rank.

Every rank of a data-parallel job takes the same wall time per step: the fast ones wait for the slow one
inside a collective (an explicit `all_reduce`, or DDP's gradient all-reduce at the end of backward). So
the step time names nobody; the time a rank spends *not waiting* does. Per rank (medians over recent
steps): busy = step - wait, wait = time in blocking collectives called from Python + the backward time
above the fastest backward of any rank (identical replicas compute the same backward; what is above the
minimum is DDP's wait). The slow rank is the one with the largest busy time; its ratio to the median
busy time is how much slower it is, and its excess is split between data wait (inside DataLoader
iteration) and compute (everything else it does itself).
"""

from statistics import median

from pydantic import BaseModel, Field

from tools.report import Evidence, Finding

MIN_RATIO = 1.3     # below this, rank-to-rank noise on a shared machine
MIN_EXCESS_S = 0.005
SKIP_FIRST = 2      # the first steps build DDP buckets, optimizer state, allocator pools


class RankTiming(BaseModel):
    rank: int
    steps: int = Field(description="steps the medians are over")
    step_ms: float
    busy_ms: float = Field(description="step time minus the time spent waiting for other ranks")
    data_ms: float = Field(description="waiting for the next batch (inside DataLoader iteration)")
    compute_ms: float = Field(description="busy minus data: forward, own backward, optimizer, the rest")
    collective_ms: float = Field(description="inside blocking torch.distributed calls made from Python")
    backward_ms: float = Field(description="inside backward (includes DDP's all-reduce wait)")
    rss_mib: float | None = None
    ratio_to_median: float | None = Field(None, description="busy / median busy of all ranks")


def _med(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
    return median(vals) if vals else 0.0


def rank_timings(progress: dict[int, dict]) -> list[RankTiming]:
    """Per-rank medians over the steps every rank has recorded (the same window on each rank)."""
    recent = {r: [x for x in p.get("recent", []) if x.get("seconds")] for r, p in progress.items() if isinstance(p, dict)}
    if len(recent) < 2 or not all(recent.values()):
        return []
    last = min(max(x["step"] for x in rows) for rows in recent.values())
    window = {r: [x for x in rows if x["step"] <= last] for r, rows in recent.items()}
    window = {r: rows[SKIP_FIRST:] if len(rows) > SKIP_FIRST + 3 else rows for r, rows in window.items()}
    if not all(window.values()):
        return []
    bwd = {r: _med(rows, "backward_s") for r, rows in window.items()}
    fastest_bwd = min(bwd.values())
    out = []
    for r, rows in sorted(window.items()):
        step, data, comm = _med(rows, "seconds"), _med(rows, "data_s"), _med(rows, "collective_s")
        busy = max(0.0, step - comm - (bwd[r] - fastest_bwd))
        rss = progress[r].get("rss")
        out.append(RankTiming(rank=r, steps=len(rows), step_ms=round(1000 * step, 2), busy_ms=round(1000 * busy, 2),
                              data_ms=round(1000 * data, 2), compute_ms=round(1000 * max(0.0, busy - data), 2),
                              collective_ms=round(1000 * comm, 2), backward_ms=round(1000 * bwd[r], 2),
                              rss_mib=round(rss / 2**20, 1) if isinstance(rss, (int, float)) else None))
    mid = median(t.busy_ms for t in out)
    for t in out:
        t.ratio_to_median = round(t.busy_ms / mid, 3) if mid > 0 else None
    return out


def straggler_finding(timings: list[RankTiming]) -> Finding | None:
    if len(timings) < 2:
        return None
    slow = max(timings, key=lambda t: t.busy_ms)
    others = [t for t in timings if t is not slow]
    mid = median(t.busy_ms for t in timings)
    if not slow.ratio_to_median or slow.ratio_to_median < MIN_RATIO or (slow.busy_ms - mid) / 1000 < MIN_EXCESS_S:
        return None
    data_excess = slow.data_ms - median(t.data_ms for t in others)
    compute_excess = slow.compute_ms - median(t.compute_ms for t in others)
    in_data = data_excess >= compute_excess
    where = (f"waiting for data: {slow.data_ms:.1f} ms per step in DataLoader iteration vs "
             f"{median(t.data_ms for t in others):.1f} ms on the other ranks" if in_data else
             f"in its own compute: {slow.compute_ms:.1f} ms per step vs {median(t.compute_ms for t in others):.1f} ms "
             "on the other ranks (data wait is normal)")
    waiting = median(t.step_ms - t.busy_ms for t in others)
    return Finding(
        failure_mode="slow_throughput", confidence=0.85 if slow.steps >= 5 else 0.6, location=f"rank {slow.rank}",
        summary=(f"rank {slow.rank} is the straggler: {slow.ratio_to_median:.2f}x the median rank's busy time "
                 f"({slow.busy_ms:.1f} vs {mid:.1f} ms per step), {where}; every other rank waits ~{waiting:.0f} ms "
                 "per step for it"),
        evidence=[Evidence(what=f"rank {t.rank} busy / data / compute / step (ms)",
                           value=f"{t.busy_ms:.1f} / {t.data_ms:.1f} / {t.compute_ms:.1f} / {t.step_ms:.1f}",
                           source=f"live instrument, median of {t.steps} steps") for t in timings[:8]],
        fix=(f"On rank {slow.rank}'s node look at " + (
            "the input pipeline: its shard, its disk or network filesystem, num_workers, pin_memory, a transform "
            "that depends on the sample (uneven sequence lengths: bucket by length)" if in_data else
            "what that rank does beyond the others (rank-0 logging, evaluation or checkpointing inside the step, "
            "a slower or throttled device: gpu_status, another job on the node)")))
