"""nan_hook_run on a target factory: train until the first non-finite value, then localise it.

The cheap path runs every step: the loss, the global gradient norm and the parameter norm after the
previous optimizer step are checked device-side and brought to the host in ONE synchronisation per
step; no per-module hooks. When that check trips, the step is re-run from the same parameters, batch
and RNG state under the Localiser (every op and every gradient checked) to name the op, the module,
the phase and the inputs it choked on.
"""

import math

import torch

import mltriage_torch as T
from mltriage_io import UserCodeError, main
from mltriage_target import load_target


def _finite(x):
    return isinstance(x, float) and math.isfinite(x)


def localise(target, model, batch, rng_state, params):
    """Re-run one step with every op checked. Returns phase, op, module, inputs, ... (all measured)."""
    names = T.param_names(model)
    out = {}
    bad_batch = [s for s in T.tensor_stats(T.flatten(batch, "batch")) if s["nan"] or s["inf"]]
    if bad_batch:
        return {"phase": "forward", "cause_hint": "non_finite_input", "batch": bad_batch}
    torch.set_rng_state(rng_state)
    for p in params:
        p.grad = None
    loc = T.Localiser(model)
    loss = None
    try:
        with loc:
            loss = target.loss(model, batch)
            if loc.first is None and bool(torch.isfinite(loss.detach()).all()):
                loss.backward()
    except Exception as e:  # noqa: BLE001 - a non-finite value may make their code raise; report what we saw
        out["rerun_error"] = f"{type(e).__name__}: {e}"[:500]
    if loc.first is not None:
        in_model = loc.first["module"] is not None
        out.update(phase="forward" if in_model else "loss", op=loc.first)
        if loc.first_module is not None:
            out["module"] = loc.first_module
        elif loc.bad_input_module is not None:
            out["module"] = loc.bad_input_module
        return out
    if loss is not None and not bool(torch.isfinite(loss.detach()).all()):
        out.update(phase="loss", op=None)
        return out
    culprit = loc.backward_culprit()
    bad_grads = [names.get(id(p), "?") for p in params if p.grad is not None
                 and not bool(torch.isfinite(p.grad).all())]
    out.update(phase="backward", backward=culprit, bad_grad_params=bad_grads[:20])
    if not bad_grads and culprit is None:
        out["not_reproduced"] = True
    return out


def run(job):
    a = job.args
    max_steps = int(a.get("max_steps", 200))
    target = load_target(a["target"], a["workspace"])
    model = target.model
    opt = target.get_optimizer()
    params = [p for p in model.parameters() if p.requires_grad]
    names = T.param_names(model)
    batches = target.batches(max_steps) if target.data is not None else None
    losses, gnorms = [], []
    guard = T.StepGuard(params)
    report = {"steps_run": 0, "found": False}
    for step in range(max_steps):
        batch = batches[step] if batches else target.batch
        rng = torch.get_rng_state()
        opt.zero_grad(set_to_none=True)
        try:
            loss = target.loss(model, batch)
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("forward", e) from e
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise UserCodeError("loss", TypeError(f"loss_fn must return a scalar tensor, got {type(loss).__name__}"
                                                  f"{tuple(loss.shape) if isinstance(loss, torch.Tensor) else ''}"))
        try:
            loss.backward()
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("backward", e) from e
        loss_v, gn_v, pn_v = guard.check(loss)  # the one host synchronisation of this step
        report["steps_run"] = step + 1
        if not _finite(pn_v):
            # the previous optimizer step wrote non-finite parameters
            bad = [(names.get(id(p), "?"), p) for p in params if not bool(torch.isfinite(p.detach()).all())]
            report.update(found=True, step=step - 1, phase="optimizer_step",
                          bad_params=T.tensor_stats(bad[:8]), bad_param_names=[n for n, _ in bad][:30],
                          optimizer=_optimizer_info(opt))
            break
        if not (_finite(loss_v) and _finite(gn_v)):
            losses.append(loss_v)
            gnorms.append(gn_v)
            report.update(found=True, step=step, **localise(target, model, batch, rng, params))
            break
        losses.append(loss_v)
        gnorms.append(gn_v)
        job.progress(step + 1, max_steps, f"step {step + 1}: loss {loss_v:.4g}")
        try:
            opt.step()
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("optimizer_step", e) from e
        guard.after_step()
    else:
        if guard.pnorm is not None and not _finite(T.to_floats(guard.pnorm)[0]):
            bad = [(names.get(id(p), "?"), p) for p in params if not bool(torch.isfinite(p.detach()).all())]
            report.update(found=True, step=max_steps - 1, phase="optimizer_step",
                          bad_params=T.tensor_stats(bad[:8]), bad_param_names=[n for n, _ in bad][:30],
                          optimizer=_optimizer_info(opt))
    report["loss_history"] = losses[-20:]
    report["grad_norm_history"] = gnorms[-20:]
    report["first_loss"] = losses[0] if losses else None
    report["max_grad_norm"] = max((g for g in gnorms if _finite(g)), default=None)
    report["optimizer"] = report.get("optimizer") or _optimizer_info(opt)
    return report


def _optimizer_info(opt):
    g = opt.param_groups[0]
    return {"type": type(opt).__name__, "lr": float(g.get("lr", float("nan"))),
            "eps": g.get("eps") if isinstance(g.get("eps"), (int, float)) else None,
            "weight_decay": g.get("weight_decay") if isinstance(g.get("weight_decay"), (int, float)) else None}


if __name__ == "__main__":
    main(run)
