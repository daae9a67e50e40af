"""Probe: evaluate a two-tensor loss component on a grid, with gradients by autograd. Stdlib + torch.

Runs in the user's interpreter. The function is `file.py:name` (or `pkg.module:name`) taking two
tensors x, y and returning the loss per point. A function that reduces its inputs (returns a
scalar) or mixes points (softmax over the batch) is evaluated point by point instead, so every
gradient belongs to its own grid point.
"""

from mltriage_io import UserCodeError, main
from mltriage_target import import_callable


def load_function(spec: str, workspace: str):
    return import_callable(spec, workspace, what="function")


def _evaluate(fn, xs, ys, torch):
    """Loss, dL/dx, dL/dy per point. Vectorised when the function is pointwise, else point by point."""
    x = xs.clone().requires_grad_(True)
    y = ys.clone().requires_grad_(True)
    try:
        out = fn(x, y)
    except BaseException as e:
        raise UserCodeError("call", e) from e
    if not isinstance(out, torch.Tensor):
        raise UserCodeError("call", TypeError(f"the function returned {type(out).__name__}, not a tensor"))
    pointwise = out.numel() == xs.numel() and xs.numel() > 1
    if pointwise:
        # a batch-coupled function (mean, softmax over points) gives different values for reversed inputs
        with torch.no_grad():
            try:
                rev = fn(xs.flip(0), ys.flip(0)).reshape(-1).flip(0)
                pointwise = torch.allclose(rev, out.detach().reshape(-1), rtol=1e-4, atol=1e-6, equal_nan=True)
            except BaseException:  # noqa: BLE001 - fall back to the safe path
                pointwise = False
    if pointwise:
        out = out.reshape(-1)
        gx, gy = torch.autograd.grad(out.sum(), (x, y), allow_unused=True)
        return out.detach(), _or_zeros(gx, xs, torch), _or_zeros(gy, ys, torch), "vectorised", (gx is None, gy is None)
    losses, gxs, gys = [], [], []
    no_x = no_y = True
    for i in range(xs.numel()):
        xi = xs[i].clone().requires_grad_(True)
        yi = ys[i].clone().requires_grad_(True)
        try:
            li = fn(xi, yi)
        except BaseException as e:
            raise UserCodeError("call", e) from e
        if not isinstance(li, torch.Tensor) or li.numel() != 1:
            raise UserCodeError("call", ValueError(
                f"the function returned shape {tuple(getattr(li, 'shape', ()))} for scalar inputs; return one loss per point"))
        li = li.reshape(())
        if li.requires_grad:
            g = torch.autograd.grad(li, (xi, yi), allow_unused=True)
        else:
            g = (None, None)
        no_x &= g[0] is None
        no_y &= g[1] is None
        losses.append(li.detach())
        gxs.append(g[0] if g[0] is not None else torch.zeros((), dtype=xs.dtype))
        gys.append(g[1] if g[1] is not None else torch.zeros((), dtype=ys.dtype))
    return torch.stack(losses), torch.stack(gxs), torch.stack(gys), "pointwise", (no_x, no_y)


def _or_zeros(g, like, torch):
    return torch.zeros_like(like) if g is None else g


def _floats(t):
    return [float(v) for v in t.double().reshape(-1).tolist()]


def run(job):
    import torch

    a = job.args
    fn = load_function(a["function"], a["workspace"])
    n = int(a["n"])
    dtype = torch.float64 if a.get("float64") else torch.float32
    xs = torch.linspace(a["x_range"][0], a["x_range"][1], n, dtype=dtype)
    ys = torch.linspace(a["y_range"][0], a["y_range"][1], n, dtype=dtype)
    X, Y = torch.meshgrid(xs, ys, indexing="ij")
    job.progress(0, 2, "evaluating the grid", force=True)
    loss, gx, gy, mode, (no_x, no_y) = _evaluate(fn, X.reshape(-1), Y.reshape(-1), torch)
    job.progress(1, 2, "evaluating representative points", force=True)
    points = a.get("points") or []
    if points:
        px = torch.tensor([p[0] for p in points], dtype=dtype)
        py = torch.tensor([p[1] for p in points], dtype=dtype)
        pl, pgx, pgy, _, _ = _evaluate(fn, px, py, torch)
        point_values = {"loss": _floats(pl), "gx": _floats(pgx), "gy": _floats(pgy)}
    else:
        point_values = {"loss": [], "gx": [], "gy": []}
    job.progress(2, 2, "done", force=True)
    return {
        "n": n, "xs": _floats(xs), "ys": _floats(ys), "mode": mode, "dtype": str(dtype).replace("torch.", ""),
        # row-major over (x, y): index i * n + j is (xs[i], ys[j])
        "loss": _floats(loss), "gx": _floats(gx), "gy": _floats(gy),
        "x_unused": bool(no_x), "y_unused": bool(no_y),
        "points": point_values,
    }


if __name__ == "__main__":
    main(run)
