"""grad_norm_snapshot on a target factory: gradient, weight and update norms of one optimizer step.

Fused: every norm is computed with torch._foreach_norm and the whole snapshot (per-parameter norms,
update norms, loss and grad-norm history, activation statistics) reaches the host in ONE .tolist().
"""

import re

import torch

import mltriage_torch as T
from mltriage_io import UserCodeError, main
from mltriage_target import load_target


def optimizer_groups(opt) -> dict:
    """id(param) -> lr of the group that holds it."""
    out = {}
    for g in getattr(opt, "param_groups", []):
        lr = g.get("lr", 0.0)
        lr = float(lr) if isinstance(lr, (int, float)) or isinstance(lr, torch.Tensor) else 0.0
        for p in g["params"]:
            out[id(p)] = lr
    return out


def snapshot_step(model, opt, step_fn, names=None):
    """Run `step_fn()` (forward+backward, returns the loss or None), step the optimizer, measure it all.

    Returns (device vectors, meta) for `assemble`; shared by the factory probe and script mode.
    """
    named = [(n, p) for n, p in (names or model.named_parameters())]
    loss = step_fn()
    grads_idx = [i for i, (_, p) in enumerate(named) if p.grad is not None and p.requires_grad]
    gvec = T.norms([named[i][1].grad for i in grads_idx])
    wvec = T.norms([p for _, p in named])
    before = [p.detach().clone() for _, p in named]
    opt.step()
    uvec = T.norms(torch._foreach_sub([p.detach() for _, p in named], before))
    return loss, gvec, wvec, uvec, grads_idx, named


def assemble(named, grads_idx, gvals, wvals, uvals, lr_of, owner) -> list:
    g_of = dict(zip(grads_idx, gvals))
    rows = []
    for i, (n, p) in enumerate(named):
        g = g_of.get(i)
        w, u = wvals[i], uvals[i]
        flags = []
        if not p.requires_grad:
            flags.append("requires_grad_false")
        elif g is None:
            flags.append("grad_none")
        elif g == 0.0:
            flags.append("grad_zero")
        if g is not None and g != g or g in (float("inf"),):
            flags.append("grad_nonfinite")
        lr = lr_of.get(id(p))
        if p.requires_grad and lr is None:
            flags.append("not_in_optimizer")
        elif lr == 0.0:
            flags.append("lr_zero")
        if p.requires_grad and lr and g and u == 0.0:
            flags.append("no_update")
        mod, mtype = owner.get(id(p), ("", ""))
        rows.append({"name": n, "module": mod, "module_type": mtype, "shape": list(p.shape), "numel": p.numel(),
                     "grad_norm": g, "weight_norm": w, "update_norm": u,
                     "update_ratio": (u / w) if w else None, "lr": lr, "flags": flags})
    return rows


def first_step_dead(params) -> set:
    """ids of parameters with no or an all-zero gradient at the FIRST step (one host sync).

    A graph cut shows from the first step on; gradients that die later (saturation after a divergence)
    are a consequence, flagged `grad_died`, not a cut.
    """
    params = list(params)
    with_grad = [p for p in params if p.grad is not None and p.requires_grad]
    vals = T.norms([p.grad for p in with_grad]).tolist() if with_grad else []
    zero = {id(p) for p, v in zip(with_grad, vals) if v == 0.0}
    return zero | {id(p) for p in params if p.grad is None and p.requires_grad}


def mark_died(rows: list, named: list, dead_at_first: set | None) -> list:
    if dead_at_first is None:
        return rows
    for row, (_, p) in zip(rows, named):
        if id(p) not in dead_at_first and ({"grad_none", "grad_zero"} & set(row["flags"])):
            row["flags"] = [f for f in row["flags"] if f not in ("grad_none", "grad_zero")] + ["grad_died"]
    return rows


def unregistered_modules(model) -> list:
    """Modules kept in a plain list, tuple or dict attribute (self.stages = [...]) and reachable from no registered
    submodule: model.parameters() leaves their weights out, so the optimizer never moves them (nor do .to() or
    state_dict()). A convenience list of modules that are registered anyway is fine."""
    registered = {id(m) for m in model.modules()}
    out = []
    for name, m in model.named_modules():
        for attr, val in vars(m).items():
            if attr.startswith("_") or not isinstance(val, (list, tuple, dict)):
                continue
            items = list(val.values()) if isinstance(val, dict) else list(val)
            hidden = [x for x in items if isinstance(x, torch.nn.Module) and id(x) not in registered]
            params = sum(p.numel() for x in hidden for p in x.parameters())
            if hidden and params:
                out.append({"where": f"{name}.{attr}" if name else attr, "owner": type(m).__name__,
                            "kind": type(val).__name__, "modules": len(hidden), "params": params,
                            "line": assignment_line(type(m), attr)})
    return out


def assignment_line(cls, attr: str) -> str | None:
    """file:line where the class first assigns self.<attr>: the line to change, which the attribute name alone
    does not give an agent reading a long file."""
    pat = re.compile(rf"\bself\.{re.escape(attr)}\s*(:[^=]*)?=(?!=)")
    for klass in cls.__mro__:
        if klass.__module__.startswith("torch."):
            break
        path, start, src = T.source_of(klass)
        hit = next((i for i, text in enumerate(src or []) if pat.search(text)), None)
        if hit is not None:
            return f"{path}:{start + hit}"
    return None


def run(job):
    a = job.args
    steps = max(1, int(a.get("steps", 1)))
    target = load_target(a["target"], a["workspace"])
    model = target.model
    opt = target.get_optimizer()
    lr_of = optimizer_groups(opt)
    owner = T.owner_modules(model)
    batches = target.batches(steps)
    losses, gnorms = [], []
    recorder = T.ActivationRecorder(model)
    out_vec, out_at = [], []
    spy = T.LossSpy()  # what the loss is given: a sigmoid applied in the loss function is the prediction too

    def grab_output(m, args, out):
        t = T.prediction(out)
        if t is not None and not out_vec:
            out_vec.append(T._act_vector(t.detach(), "output", "output"))
            out_at.append(T.storage_of(t))

    snap = None
    dead_at_first = None
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        last = step == steps - 1

        def fwd_bwd(batch=batches[step], last=last):
            try:
                if last:
                    h = model.register_forward_hook(grab_output)
                    try:
                        with recorder, spy:
                            loss = target.loss(model, batch)
                    finally:
                        h.remove()
                else:
                    loss = target.loss(model, batch)
            except Exception as e:  # noqa: BLE001
                raise UserCodeError("forward", e) from e
            try:
                loss.backward()
            except Exception as e:  # noqa: BLE001
                raise UserCodeError("backward", e) from e
            return loss

        if last:
            try:
                snap = snapshot_step(model, opt, fwd_bwd)
            except UserCodeError:
                raise
            except Exception as e:  # noqa: BLE001
                raise UserCodeError("optimizer_step", e) from e
            losses.append(snap[0].detach().reshape(()).float())
            gnorms.append(snap[1].norm() if snap[1].numel() else torch.zeros(()))
        else:
            loss = fwd_bwd()
            if step == 0:
                dead_at_first = first_step_dead(model.parameters())
            losses.append(loss.detach().reshape(()).float())
            gnorms.append(T.global_norm([p.grad for p in model.parameters() if p.grad is not None and p.requires_grad]))
            try:
                opt.step()
            except Exception as e:  # noqa: BLE001
                raise UserCodeError("optimizer_step", e) from e
        job.progress(step + 1, steps, f"step {step + 1}/{steps}")
    loss, gvec, wvec, uvec, grads_idx, named = snap
    act_vecs = [r[4] for r in recorder.records]
    # the ONE host synchronisation of the snapshot
    vals = T.to_floats(torch.stack(losses), torch.stack(gnorms), gvec, wvec, uvec, *act_vecs, *out_vec)
    s, n_p, n_g = steps, len(named), len(grads_idx)
    loss_hist, gn_hist = vals[:s], vals[s:2 * s]
    o = 2 * s
    gvals, wvals, uvals = vals[o:o + n_g], vals[o + n_g:o + n_g + n_p], vals[o + n_g + n_p:o + n_g + 2 * n_p]
    o += n_g + 2 * n_p
    acts = T.decode_acts(recorder.records, vals[o:o + 7 * len(act_vecs)])
    predicted = set(out_at[:1]) | ({T.storage_of(spy.input)} if spy.input is not None else set())
    for a, at in zip(acts, recorder.storages):  # the activation that is the prediction (a sigmoid head's)
        a["is_output"] = at in predicted and at != -1
    o += 7 * len(act_vecs)
    output = None
    if out_vec:
        mean, std, zero, _, _, const, _ = vals[o:o + 7]
        output = {"mean": mean, "std": std, "zero_frac": zero, "constant": const > 0.5}
    rows = mark_died(assemble(named, grads_idx, gvals, wvals, uvals, lr_of, owner), named, dead_at_first)
    return {"mode": "target", "step": steps, "global_grad_norm": gn_hist[-1], "params": rows,
            "depth_order": recorder.module_order, "activations": acts, "output": output,
            "loss_history": loss_hist, "grad_norm_history": gn_hist, "optimizer": type(opt).__name__,
            "syncs": 1, "unregistered": unregistered_modules(model)}


if __name__ == "__main__":
    main(run)
