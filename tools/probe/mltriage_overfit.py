"""overfit_test: train on ONE fixed batch until the loss falls by 95% (or below a task-aware floor).

A model that cannot memorise one batch has a bug (graph, loss, optimizer wiring), not a tuning problem.
The loss is read every few steps (a host sync), and the run stops as soon as it passes.
"""

import math
import time

import torch

import mltriage_torch as T
from mltriage_io import UserCodeError, main
from mltriage_target import load_target

CHECK_EVERY = 5
NONNEGATIVE = {"cross_entropy", "nll_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss",
               "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div"}


def run(job):
    a = job.args
    steps = int(a.get("steps", 300))
    target = load_target(a["target"], a["workspace"])
    model = target.model
    opt = target.get_optimizer()
    if a.get("lr") is not None:
        for g in opt.param_groups:
            g["lr"] = float(a["lr"])
    lr = float(opt.param_groups[0]["lr"])
    batch = target.first_batch()
    spy = T.LossSpy()
    params = [p for p in model.parameters() if p.requires_grad]
    start_params = [p.detach().clone() for p in params]
    t0 = time.monotonic()
    traj, pending = [], []
    initial = best = None
    passed, outcome, steps_run, threshold = False, None, 0, None
    grads_none, still_zero = 0, []
    gnorm0 = []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        try:
            if step == 0:
                with spy:
                    loss = target.loss(model, batch)
            else:
                loss = target.loss(model, batch)
            loss.backward()
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("forward" if step == 0 else "training", e) from e
        if step == 0:
            grads_none = sum(p.grad is None for p in params)
            gnorm0 = T.norms([p.grad if p.grad is not None else torch.zeros(()) for p in params]).tolist()
            still_zero = [p for p, v in zip(params, gnorm0) if p.grad is not None and v == 0.0]
        elif still_zero:
            # a zero-initialised head (its bias at the base rate's log-odds) passes no gradient back on the first
            # step only: a parameter counts as cut off when its gradient stays zero on every step, not just the first
            live = T.norms([p.grad if p.grad is not None else torch.zeros(()) for p in still_zero]).tolist()
            still_zero = [p for p, v in zip(still_zero, live) if v == 0.0]
        pending.append(loss.detach().reshape(()).float())
        try:
            opt.step()
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("optimizer_step", e) from e
        steps_run = step + 1
        if len(pending) == CHECK_EVERY or step == 0 or step == steps - 1:
            vals = torch.stack(pending).tolist()
            base = steps_run - len(vals)
            traj += [(base + i, v) for i, v in enumerate(vals)]
            pending = []
            if initial is None:
                initial = vals[0]
                threshold = _threshold(initial, spy.name, target)
            finite = [v for v in vals if math.isfinite(v)]
            if finite:
                best = min([best] + finite) if best is not None else min(finite)
            if any(not math.isfinite(v) for v in vals):
                outcome = "nan"
                break
            if math.isfinite(initial) and vals[-1] > max(3 * abs(initial), initial + 5) and steps_run > 10:
                outcome = "diverged"
                break
            if initial <= 0:  # a loss that starts negative cannot be judged by its drop: see the outcome below
                pass
            elif vals[-1] < 0 and spy.name in NONNEGATIVE:
                # built on a non-negative loss yet below zero: a term is subtracted (a flipped KL, a negated
                # loss); reaching the threshold this way is not overfitting
                outcome = "negative"
                break
            elif vals[-1] <= threshold:
                passed, outcome = True, "passed"
                break
            job.progress(steps_run, steps, f"step {steps_run}: loss {vals[-1]:.4g}")
    final = traj[-1][1] if traj else None
    if outcome is None and initial is not None and (initial < 0 or (final is not None and final < 0)) \
            and spy.name in NONNEGATIVE:
        outcome = "negative"
    if outcome is None:
        drop = (initial - final) / abs(initial) if initial else 0.0
        if final is not None and final > initial * 1.5 + 1e-6:
            outcome = "diverged"
        elif drop < 0.1:
            outcome = "flat"
        else:
            outcome = "slow"
    moved = T.to_floats(T.norms(torch._foreach_sub([p.detach() for p in params], start_params)),
                        T.norms(start_params)) if params else []
    n = len(params)
    rel = [m / w if w else m for m, w in zip(moved[:n], moved[n:])]
    return {"passed": passed, "outcome": outcome, "steps_run": steps_run, "max_steps": steps,
            "initial_loss": initial, "final_loss": final, "best_loss": best, "threshold": threshold,
            "trajectory": _downsample(traj, 60), "wall_time_s": time.monotonic() - t0, "lr": lr,
            "loss_kind": spy.name, "loss_shapes": spy.shapes, "trainable_params": n, "params_grad_none": grads_none,
            "params_grad_zero": len(still_zero),
            # unchanged although they had a gradient: left out of the optimizer / lr 0
            "params_unchanged": sum(r == 0.0 and g > 0 for r, g in zip(rel, gnorm0)),
            "median_relative_change": sorted(rel)[len(rel) // 2] if rel else None,
            "optimizer": type(opt).__name__, "training_mode": model.training, **_ce_facts(spy)}


def _ce_facts(spy):
    """Is cross_entropy fed probabilities (a double softmax)? How many classes?"""
    if spy.name != "cross_entropy" or spy.input is None or spy.input.dim() < 2:
        return {}
    x = spy.input.float()
    prob = bool((x.min() >= 0) & (x.max() <= 1) & ((x.sum(1) - 1).abs().max() < 1e-3))
    return {"ce_classes": int(x.shape[1]), "ce_input_is_probability": prob}


def _threshold(initial, loss_kind, target):
    """Pass at a 95% drop, or below a floor that means 'memorised' for the task."""
    floor = 0.05 * initial if math.isfinite(initial) else 0.0
    if loss_kind in ("cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits") \
            or target.task == "classification" or target.num_classes:
        floor = max(floor, 0.05)
    return floor


def _downsample(traj, n):
    if len(traj) <= n:
        return traj
    stride = len(traj) / n
    keep = [traj[int(i * stride)] for i in range(n)]
    return keep + ([traj[-1]] if keep[-1] != traj[-1] else [])


if __name__ == "__main__":
    main(run)
