"""lr_range_test (Smith 2015, "Cyclical Learning Rates"): raise the LR exponentially on a copy, watch the loss.

The model and a fresh optimizer of the user's kind are deep-copied, so the target is never touched.
Losses are brought to the host in chunks (not once per step) and smoothed with a bias-corrected EMA.
"""

import copy
import math

import torch

from mltriage_io import UserCodeError, main
from mltriage_target import load_target

CHUNK = 10
BETA = 0.9


def run(job):
    a = job.args
    lo, hi, steps = float(a.get("min_lr", 1e-7)), float(a.get("max_lr", 10.0)), int(a.get("steps", 100))
    target = load_target(a["target"], a["workspace"])
    current = [float(g["lr"]) for g in target.get_optimizer().param_groups]
    model = copy.deepcopy(target.model)
    model.train()
    opt = target.make_optimizer(model.parameters())
    batches = target.batches(steps)
    lrs = [lo * (hi / lo) ** (i / max(1, steps - 1)) for i in range(steps)]
    raw, pending, avg, best, smooth = [], [], 0.0, math.inf, []
    stopped = None
    for i, lr in enumerate(lrs):
        for g in opt.param_groups:
            g["lr"] = lr
        opt.zero_grad(set_to_none=True)
        try:
            loss = target.loss(model, batches[i])
            loss.backward()
            opt.step()
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("training", e) from e
        pending.append(loss.detach().reshape(()).float())
        if len(pending) == CHUNK or i == steps - 1:
            vals = torch.stack(pending).tolist()
            pending = []
            for v in vals:
                k = len(raw)
                raw.append(v)
                if not math.isfinite(v):
                    stopped = stopped or ("non-finite loss", k)
                    break
                avg = BETA * avg + (1 - BETA) * v
                s = avg / (1 - BETA ** (k + 1))
                smooth.append(s)
                best = min(best, s)
                if k > 10 and s > 4 * best:
                    stopped = stopped or ("loss above 4x its minimum", k)
                    break
            job.progress(i + 1, steps, f"lr {lr:.2e}: loss {vals[-1]:.4g}")
            if stopped:
                break
    n = len(smooth)
    curve = [(lrs[k], raw[k], smooth[k]) for k in range(n)]
    report = {"curve": curve[:: max(1, n // 60)] + ([curve[-1]] if n and (n - 1) % max(1, n // 60) else []),
              "steps_run": len(raw), "min_lr": lo, "max_lr": hi, "current_lr": current[0] if current else None,
              "current_lrs": current, "optimizer": type(opt).__name__,
              "stopped": stopped[0] if stopped else None,
              "diverged_at_lr": lrs[stopped[1]] if stopped else None}
    if n < 5:
        return report
    kmin = min(range(n), key=lambda k: smooth[k])
    # steepest descent of the smoothed loss per decade of LR, before the minimum
    logs = [math.log10(lrs[k]) for k in range(n)]
    slopes = [(smooth[k + 2] - smooth[k - 2]) / (logs[k + 2] - logs[k - 2]) for k in range(2, max(2, kmin - 1))]
    steep = min(range(len(slopes)), key=lambda j: slopes[j]) + 2 if slopes else None
    report.update(min_loss_lr=lrs[kmin], min_loss=smooth[kmin], initial_loss=smooth[0],
                  steepest_lr=lrs[steep] if steep is not None else None,
                  suggested_lr=lrs[kmin] / 10)
    return report


if __name__ == "__main__":
    main(run)
