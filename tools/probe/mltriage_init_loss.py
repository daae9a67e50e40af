"""init_loss_check: the loss at initialisation against its chance value, output scale, random-input test.

Expected values: ln(C) for C-class cross-entropy (C from num_classes or the logits' width), ln 2 for
binary cross-entropy, E[y^2] (= target variance + mean^2) for MSE from a zero-centred output.
The random-input test trains a copy for a few steps, then compares the loss on real inputs with the
loss on random inputs of the same shape and scale: the same value means the inputs carry nothing.
"""

import copy
import linecache
import math
import time

import torch
from torch.overrides import TorchFunctionMode

import mltriage_torch as T
from mltriage_io import UserCodeError, main
from mltriage_target import load_target

CE = ("cross_entropy", "nll_loss")
BCE = ("binary_cross_entropy", "binary_cross_entropy_with_logits")
MSE = ("mse_loss",)


BOUNDED = {"sigmoid": (0.0, 1.0), "sigmoid_": (0.0, 1.0), "tanh": (-1.0, 1.0), "tanh_": (-1.0, 1.0)}
REGRESSION_LOSSES = ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy")


def head_reach(spy, rec) -> dict | None:
    """When the prediction a regression-style loss reads is a sigmoid's or tanh's output: its range and the share of
    target values outside it (with a 2% margin), which no weight can ever reach."""
    if spy.name not in REGRESSION_LOSSES or spy.input is None or spy.target is None \
            or not spy.target.is_floating_point() or spy.target.numel() < 16:
        return None
    at = T.storage_of(spy.input)
    op = next((r[2] for r, st in zip(rec.records, rec.storages) if st == at and st != -1 and r[2] in BOUNDED), None)
    if op is None:
        return None
    lo, hi = BOUNDED[op]
    margin = 0.02 * (hi - lo)
    y = spy.target.float()
    outside, ymin, ymax = T.to_floats(((y < lo - margin) | (y > hi + margin)).float().mean(), y.min(), y.max())
    return {"op": op.rstrip("_"), "range": [lo, hi], "target_outside": outside, "target_min": ymin, "target_max": ymax}


def ignored_class(spy, batch) -> dict | None:
    """A per-example classification (one label per row of the batch) whose cross-entropy ignores a label that is
    one of the output's classes: that class's rows never train (a tagger's padding id reused for a sentence
    classifier). A token-level loss flattened to one label per token (logits.view(-1, V)) has more labels than
    the batch has rows, and its ignore_index is its padding: not read."""
    ii, y, x = spy.ignore_index, spy.target, spy.input
    if spy.name not in CE or not isinstance(ii, int) or y is None or x is None or y.is_floating_point() \
            or y.dim() != 1 or x.dim() != 2 or not 0 <= ii < x.shape[1] or y.numel() < 8:
        return None
    if not any(t.dim() >= 2 and t.shape[0] == y.numel() for _, t in T.flatten(batch)):
        return None
    share = T.to_floats((y == ii).float().mean())[0]
    return {"ignore_index": ii, "classes": int(x.shape[1]), "share": share, "rows": int(y.numel())} if share > 0 else None


DIRECTION_LEVELS = (-2.0, -1.0, 0.0, 1.0, 2.0)  # logits: probabilities 0.12 .. 0.88, where any model passes


def _seeded(seed: int) -> None:
    """The same random draws for the torch, numpy and random generators a loss function may use."""
    import random
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass


def loss_direction(target, model, batch, spy) -> dict | None:
    """Does the loss pull each row's prediction toward its own label? A binary classifier's output (one logit or
    probability per row, labels 0/1 that its binary cross-entropy scores) is set to one value for every row, at
    each of DIRECTION_LEVELS, and the gradient of the loss with respect to it read per row: it must lower the
    prediction of a 0 and raise that of a 1 at every level. A loss whose weighting turns with the prediction (a focal term written (1 - p) ** gamma for
    every row instead of (1 - p_t) ** gamma) pushes rows past a probability toward the wrong label. None when it
    cannot be judged: no such output or labels, or a loss that draws random targets (mixup) each call."""
    if spy.name not in BCE or spy.target is None:  # a binary cross-entropy (or a focal loss built on one) only:
        return None  # a regression or sequence loss whose targets happen to be 0/1 is not pushed toward a label
    slot = T.label_slot(batch, spy)
    y = next((t for path, t in T.flatten(batch) if path == slot), None)
    if y is None or y.dim() > 2 or y.numel() < 8 or spy.target.numel() != y.numel() \
            or not torch.equal(spy.target.detach().float().reshape(-1), y.detach().float().reshape(-1)):
        return None
    yv = y.detach().float().reshape(-1)
    if not bool(((yv == 0) | (yv == 1)).all()) or not bool((yv == 0).any()) or not bool((yv == 1).any()):
        return None
    outs = []
    hook = model.register_forward_hook(lambda m, i, o: outs.append(o) if not outs else None)
    try:
        with torch.no_grad():
            target.loss(model, batch)
    finally:
        hook.remove()
    out = outs[0] if outs else None
    if not torch.is_tensor(out) or not out.is_floating_point() or out.numel() != yv.numel() \
            or out.shape[0] != y.shape[0]:
        return None
    probs = bool((out >= 0).all()) and bool((out <= 1).all())  # a sigmoid inside the model, BCELoss after it

    def grads(level: float, seed: int):
        value = torch.sigmoid(torch.tensor(level)).item() if probs else level
        z = torch.full(out.shape, value, dtype=out.dtype, requires_grad=True)
        swap = model.register_forward_hook(lambda m, i, o: z)
        try:
            _seeded(seed)
            with torch.enable_grad():
                (g,) = torch.autograd.grad(target.loss(model, batch), z, allow_unused=True)
        finally:
            swap.remove()
        return None if g is None else g.detach().float().reshape(-1)

    was = model.training
    model.eval()
    try:
        first, again = grads(0.0, 0), grads(0.0, 1)
        if first is None or again is None or not torch.allclose(first, again, rtol=1e-4, atol=1e-9):
            return None  # no gradient reaches the output, or each call draws other targets
        rows = []
        for level in DIRECTION_LEVELS:
            g = grads(level, 0)
            tol = 1e-6 * float(g.abs().max()) if g is not None else 0.0
            for label, wrong in ((0, g < -tol), (1, g > tol)):
                mine = yv == label
                rows.append({"level": level, "label": label,
                             "probability": round(torch.sigmoid(torch.tensor(level)).item(), 3),
                             "wrong": float(wrong[mine].float().mean()), "rows": int(mine.sum())})
    except Exception:  # noqa: BLE001 - a loss that cannot take a constant output: not this check's business
        return None
    finally:
        model.train(was)
    return {"output": "probability" if probs else "logit", "checks": rows}


def best_constant_loss(spy) -> float | None:
    """The floor of a model that knows nothing about its inputs, from the first batch's targets: under MSE the
    targets' variance (an untrained sigmoid decoder at 0.5 everywhere sits near it, far under E[y^2]); under a
    binary or categorical cross-entropy the entropy of the label frequencies (a head whose bias starts at the base
    rate's log-odds, Karpathy's "init well", scores it at step 0: dev `card_fraud_entity_embedding_mlp`, 0.22
    against ln 2)."""
    y = spy.target
    if y is None or y.numel() < 2:
        return None
    if spy.name in MSE:
        return float(y.float().var(unbiased=False))
    if spy.name in BCE and y.is_floating_point():
        p = float(y.float().mean().clamp(1e-7, 1 - 1e-7))
        return -(p * math.log(p) + (1 - p) * math.log(1 - p))
    if spy.name in CE and not y.is_floating_point():
        counts = torch.bincount(y[y >= 0].reshape(-1).long())
        f = counts[counts > 0].float() / counts.sum()
        return float(-(f * f.log()).sum())
    return None


def expected_loss(spy, target, out_width):
    """(value, how it was derived) or (None, why not)."""
    if spy.name in CE:
        c = target.num_classes or (spy.input.shape[1] if spy.input is not None and spy.input.dim() >= 2 else None)
        if c:
            return math.log(c), f"ln({c}) for {c}-class {spy.name}"
    if spy.name in BCE:
        return math.log(2), f"ln(2) for {spy.name} at zero logits"
    if spy.name in MSE and spy.target is not None:
        y = spy.target.float()
        return float((y ** 2).mean()), "E[y^2] = target variance + mean^2, for an output near zero"
    # a loss written by hand scores classes only when the output is one logit per class: a conditional VAE names
    # its condition's classes too, and its reconstruction loss has no ln(C) chance value
    if target.num_classes and out_width == int(target.num_classes):
        c = int(target.num_classes)
        return math.log(c), f"ln({c}) from num_classes={c}"
    if target.task == "classification" and out_width and out_width > 1:
        return math.log(out_width), f"ln({out_width}) from the output width"
    return None, "unknown loss: pass num_classes/task in the target or use a standard torch loss"


NORM_TYPES = ("Dropout", "BatchNorm", "InstanceNorm", "AlphaDropout", "FeatureAlphaDropout", "SyncBatchNorm")


def eval_mode_modules(model) -> list:
    """Dropout/batch-norm modules that would behave as at evaluation: cheap, so it runs at every triage.

    A frozen part (every parameter of the module, or of its parent for a dropout, has requires_grad=False)
    is left out: a pretrained backbone kept in eval mode on purpose is not a bug.
    """
    mods = dict(model.named_modules())

    def frozen(name, m):
        ps = list(m.parameters())
        if not ps and "." in name:
            ps = list(mods[name.rsplit(".", 1)[0]].parameters())
        return bool(ps) and not any(p.requires_grad for p in ps)

    return [[n or "(root)", type(m).__name__] for n, m in mods.items()
            if type(m).__name__.startswith(NORM_TYPES) and not m.training and not frozen(n, m)][:20]


# PyTorch's default is 0.1, and TensorFlow's default decay 0.99 ports to 0.01: a smaller momentum is a running
# average over more than 100 steps (a TF decay of 0.999 copied as momentum=1e-3 averages over ~1000)
SLOW_NORM = 0.01


def slow_norm_stats(model) -> list:
    """Batch-norm layers whose running statistics follow the batches slowly: [name, momentum]."""
    return [[n or "(root)", m.momentum] for n, m in model.named_modules()
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.track_running_stats
            and m.momentum is not None and m.momentum < SLOW_NORM][:20]


SEQ_FIRST_LAYERS = (torch.nn.RNNBase, torch.nn.MultiheadAttention)  # batch_first=False by default


def _row_copied(obj, rows: int):
    """The batch with row 1 copied into row 0 of every tensor whose first dimension is the batch's `rows` (inputs,
    labels, lengths alike, so the batch stays valid: sorted lengths stay sorted)."""
    if isinstance(obj, torch.Tensor):
        if obj.dim() == 0 or obj.shape[0] != rows:
            return obj
        out = obj.clone()
        out[0] = obj[1]
        return out
    if isinstance(obj, (list, tuple)):
        items = [_row_copied(v, rows) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(obj, dict):
        return type(obj)({k: _row_copied(v, rows) for k, v in obj.items()})
    return obj


class _RowsSite(TorchFunctionMode):
    """Records every float op of the model's forward (only inside the root module's call). A first pass keeps the
    outputs; a second pass, on the batch with row 0 copied from row 1, names the first op whose output has the
    rows of the batch mixed while none of its inputs had: the line that crosses the batch dimension."""

    def __init__(self, model, rows, ref=None):
        super().__init__()
        self.model, self.rows, self.ref = model, rows, ref
        self.outs, self.mixed, self.site, self.depth, self.lost, self.kept = [], {}, None, 0, False, 0

    def __enter__(self):
        self._h = [self.model.register_forward_pre_hook(lambda *a: setattr(self, "depth", self.depth + 1)),
                   self.model.register_forward_hook(lambda *a: setattr(self, "depth", self.depth - 1))]
        return super().__enter__()

    def __exit__(self, *exc):
        for h in self._h:
            h.remove()
        return super().__exit__(*exc)

    def _moved(self, ref, new) -> bool:
        """Some row 2.. of `new` is none of `ref`'s rows, along every dimension the size of the batch. Rows put in
        another order are not mixed (pack_padded_sequence sorts by length, and row 0 took row 1's); a tensor
        without a batch-sized dimension is not judged (a packed sequence, a length's maximum)."""
        dims = [d for d, n in enumerate(new.shape) if n == self.rows]
        if not dims or torch.equal(ref, new):
            return False
        tol = 1e-4 * (ref.float().abs().max().item() + 1e-6)

        def moved_along(d):
            a = ref.float().movedim(d, 0).reshape(self.rows, -1)
            b = new.float().movedim(d, 0).reshape(self.rows, -1)[2:]
            return bool((torch.cdist(b, a, p=float("inf")).amin(1) > tol).any())
        return all(moved_along(d) for d in dims)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.depth < 1 or self.lost or self.site is not None or len(self.outs) > 5000:
            return out
        outs = [t for _, t in T.flatten(out) if t.is_floating_point()]
        if not outs:
            return out
        i, name = len(self.outs), T._fn_name(func)
        if self.ref is None:
            self.kept += sum(t.numel() for t in outs)
            if self.kept > ROWS_SITE_ELEMENTS:  # a large model's every activation is not worth a probe's memory
                self.lost = True
                return out
            self.outs.append((name, [t.detach().clone() for t in outs]))
            return out
        self.outs.append(None)
        if i >= len(self.ref) or self.ref[i][0] != name or len(self.ref[i][1]) != len(outs):
            self.lost = True  # the two forwards took different paths: no op to pair with
            return out
        # a shape that changed with row 0 (a packed sequence's length) is not judged
        moved = [a.shape == b.shape and self._moved(a, b.detach()) for a, b in zip(self.ref[i][1], outs)]
        for t, m in zip(outs, moved):
            self.mixed[id(t)] = (m, t)  # the tensor is kept so its id is not reused
        ins = [t for _, t in T.flatten((args, kwargs or {}))]
        if any(moved) and not any(self.mixed.get(id(t), (False,))[0] for t in ins):
            self.site = T.user_frame()
        return out


ROWS_SITE_ELEMENTS = 50_000_000  # ~200 MB of float32 kept from the first forward


def mixing_site(target, model, batch, copied, rows: int) -> str | None:
    """file:line (function) of the user's line where the rows first mix, or None."""
    runs = []
    for b in (batch, copied):
        with _RowsSite(model, rows, runs[0].outs if runs else None) as rec:
            torch.manual_seed(0)
            target.loss(model, b)
        if rec.lost:
            return None
        runs.append(rec)
    return runs[1].site


def _with_code(site: str | None) -> dict | None:
    """{"where": "train.py:115 (forward)", "code": the line's text}."""
    if not site:
        return None
    path, _, rest = site.rpartition(":")
    line = linecache.getline(path, int(rest.split()[0])).strip() if rest.split()[0].isdigit() else ""
    return {"where": site, "code": line[:160]}


def rows_mixed(target, model, batch) -> dict | None:
    """Does the model's output for a row move when another row of the batch changes? In eval mode no layer should
    mix rows (batch norm uses its running statistics), so rows 2.. must give the same output when row 0 becomes a
    copy of row 1. A view/reshape across the batch dimension, an RNN fed batch-first without batch_first=True or a
    reduction over dim 0 mixes them. None when it cannot be judged (no batch-first output, a random eval)."""
    tensors = [t for _, t in T.flatten(batch) if t.dim() > 0]
    rows = tensors[0].shape[0] if tensors else 0
    if rows < 4:
        return None
    # a sequence-first model's dim 0 is time, which a later step may read: judge only with one label per row
    seq_first = any(isinstance(m, SEQ_FIRST_LAYERS) and not getattr(m, "batch_first", True) for m in model.modules())
    if seq_first and not any(t.dim() == 1 and t.shape[0] == rows for t in tensors[1:]):
        return None
    copied = _row_copied(batch, rows)
    outs, fed = [], []
    hook = model.register_forward_hook(lambda m, i, o: outs.append(T.prediction(o)) if len(outs) < 3 else None)
    # what the model's root is fed: a loss function that mixes rows before the model (mixup's x.flip(0))
    # changes rows 2.. of its input already, and then it is not the model that mixes them
    pre = model.register_forward_pre_hook(lambda m, args, kwargs: fed.append(
        [t.detach().clone() for _, t in T.flatten((args, kwargs)) if t.dim() > 0 and t.shape[0] == rows])
        if len(fed) < 3 else None, with_kwargs=True)
    was = model.training
    model.eval()
    try:
        with torch.no_grad():
            for b in (batch, batch, copied):
                n = len(outs)
                torch.manual_seed(0)  # the same random draws each time (a functional dropout left on)
                target.loss(model, b)
                if len(outs) == n:
                    return None  # the loss never called the model's root
    except Exception:  # noqa: BLE001 - a batch the model cannot take this way: not this check's business
        return None
    finally:
        hook.remove()
        pre.remove()
        model.train(was)
    if len(fed) == 3 and len(fed[0]) == len(fed[2]) and any(
            x.shape != y.shape or not torch.equal(x[2:], y[2:]) for x, y in zip(fed[0], fed[2])):
        return None  # rows 2.. of the model's own input moved: the mixing is outside the model
    a, again, b = outs[:3]
    if any(o is None or o.dim() == 0 or o.shape[0] != rows for o in (a, again, b)) or a.shape != b.shape:
        return None
    a, again, b = a[2:].float(), again[2:].float(), b[2:].float()
    if a.dim() == 2 and a.shape[1] == rows:  # a row-against-row score matrix (in-batch negatives): rows 0, 1 are
        a, again, b = a[:, 2:], again[:, 2:], b[:, 2:]  # columns there, and they did change
    scale = a.abs().max().item() + 1e-6
    if (a - again).abs().max().item() > 1e-6 * scale:
        return None  # the eval forward is not deterministic: nothing to compare
    change = (a - b).abs().reshape(rows - 2, -1).amax(1)
    moved = (change > 1e-4 * scale).nonzero().flatten().tolist()
    site = None
    if moved:
        model.eval()
        try:
            with torch.no_grad():
                site = _with_code(mixing_site(target, model, batch, copied, rows))
        except Exception:  # noqa: BLE001 - where is a bonus: the finding stands without it
            site = None
        finally:
            model.train(was)
    return {"rows": rows, "other_rows_moved": len(moved), "first_moved": (moved[0] + 2) if moved else None,
            "max_change": change.max().item() / scale, "site": site}


def zero_weight_layers(model, outputs: int) -> list[str]:
    """Output layers (as many outputs as the prediction has) whose weight is exactly zero: a head zero-initialised on
    purpose (its bias set to the class prior, Karpathy's "init well") gives every row the same output at init, yet
    its weight's gradient (its input times the error) is not zero, so it learns from the first step. A hidden layer
    set to zero is not one: its units stay identical (symmetry never broken)."""
    return [name for name, m in model.named_modules()
            if isinstance(m, (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d)) and m.weight.numel()
            and m.weight.shape[0] == outputs and not bool(m.weight.detach().any())][:3]


def run(job):
    a = job.args
    n_batches = int(a.get("batches", 4))
    train_steps = int(a.get("train_steps", 40))
    target = load_target(a["target"], a["workspace"])
    model = target.model
    batches = target.batches(n_batches)
    spy = T.LossSpy()
    rec = T.ActivationRecorder(model)
    bcast = T.BroadcastWatch()
    outs = []
    hook = model.register_forward_hook(
        lambda m, i, o: outs.append(T.prediction(o, scalar_ok=True)) if not outs else None)
    # where the tensors the model's first call reads start in memory: is the loss target one of them (or a view
    # of one from its start)? data_ptr counts the offset, so the shifted targets of an LM are not
    fed = set()
    pre = model.register_forward_pre_hook(lambda m, args, kwargs: fed.update(
        t.data_ptr() for _, t in T.flatten((args, kwargs))) if not fed else None, with_kwargs=True)
    losses = []
    try:
        with torch.no_grad():
            for i, b in enumerate(batches):
                if i == 0:
                    with spy, rec, bcast:
                        losses.append(target.loss(model, b).detach().float())
                else:
                    losses.append(target.loss(model, b).detach().float())
    except Exception as e:  # noqa: BLE001
        raise UserCodeError("forward", e) from e
    finally:
        hook.remove()
        pre.remove()
    out = outs[0].detach() if outs and outs[0] is not None else None
    ce_input = spy.input if spy.name in CE else None
    logits = ce_input if ce_input is not None else out
    per_el = spy.per_element()
    parts = [torch.stack(losses), per_el if per_el is not None else torch.full((), float("nan"))] \
        + [r[4] for r in rec.records]
    if logits is not None:
        lf = logits.float()
        flat = lf.reshape(lf.shape[0], -1) if lf.dim() > 1 else lf.reshape(-1, 1)
        is_prob = (lf.min() >= 0) & (lf.max() <= 1) & ((lf.sum(1) - 1).abs().max() < 1e-3) if lf.dim() >= 2 \
            else torch.zeros((), dtype=torch.bool)
        parts.append(torch.stack([lf.std(), lf.mean(), lf.abs().max(),
                                  (flat.std(0).max() if flat.shape[0] > 1 else torch.zeros(())),
                                  is_prob.float()]))
    vals = T.to_floats(*parts)  # one synchronisation
    nb = len(losses)
    loss_vals, spy_loss = vals[:nb], vals[nb]
    acts = T.decode_acts(rec.records, vals[nb + 1:nb + 1 + 7 * len(rec.records)])
    o = nb + 1 + 7 * len(rec.records)
    out_stats = None
    if logits is not None:
        std, mean, absmax, spread, is_prob = vals[o:o + 5]
        rows = logits.shape[0] if logits.dim() > 0 else 1
        out_stats = {"std": std, "mean": mean, "absmax": absmax,
                     "constant": (spread <= 1e-6 * (1 + absmax)) if rows > 1 else None,  # one value has no spread
                     "is_probability": is_prob > 0.5, "shape": list(logits.shape)}
        if out_stats["constant"]:
            out_stats["zero_weight_layers"] = zero_weight_layers(model, logits.shape[1] if logits.dim() > 1 else 1)
    finite = [v for v in loss_vals if math.isfinite(v)]
    loss = sum(finite) / len(finite) if finite else float("nan")
    total = loss
    # compare like with like: the standard loss term per element, not a sum over features (reduction="sum")
    # or a total that adds a KL/regulariser term
    # (a negative total built on a non-negative term is a flipped sign: keep the total, it is the finding)
    if (spy.reduction in ("sum", "none") or (math.isfinite(spy_loss) and abs(spy_loss - loss) > 1e-3 * (1 + abs(loss)))) \
            and not (loss < 0 <= spy_loss):
        loss = spy_loss if math.isfinite(spy_loss) else loss
    out_width = out.shape[-1] if out is not None and out.dim() >= 2 else None
    expected, derivation = expected_loss(spy, target, out_width)
    constant = best_constant_loss(spy)
    report = {"loss": loss, "total_loss": total, "loss_reduction": spy.reduction, "batch_losses": loss_vals, "expected": expected, "expected_from": derivation,
              "best_constant_loss": constant,
              "loss_kind": spy.name, "loss_shapes": spy.shapes, "num_classes": target.num_classes, "output": out_stats,
              "layers": [r for r in acts if r["kind"] == "layer"], "training_mode": model.training,
              "eval_mode_modules": eval_mode_modules(model), "slow_norm_stats": slow_norm_stats(model),
              "outer_broadcasts": bcast.hits,
              "weight_loads": target.weight_loads}
    if spy.input is not None and spy.input.is_floating_point() and spy.input.numel():
        lo, hi = T.to_floats(spy.input.min(), spy.input.max())
        report["loss_input"] = {"min": lo, "max": hi, "n": spy.input.numel()}
    ignored = ignored_class(spy, batches[0])
    if ignored is not None:
        report["ignored_class"] = ignored
    try:
        report["loss_direction"] = loss_direction(target, model, batches[0], spy)
    except Exception:  # noqa: BLE001 - an extra check that cannot run on this model must not cost the report
        report["loss_direction"] = None
    reach = head_reach(spy, rec)
    if reach is not None:
        report["head_reach"] = reach
    if spy.poisson is not None:
        report["poisson"] = {**spy.poisson, "input_min": T.to_floats(spy.poisson["input_min"])[0]}
    reconstructs = spy.target is not None and spy.target.data_ptr() in fed
    try:
        report["rows_mixed"] = rows_mixed(target, model, batches[0])
    except Exception:  # noqa: BLE001 - an extra check that cannot run on this model must not cost the report
        report["rows_mixed"] = None
    report["random_input"] = random_input_test(target, model, batches, spy, train_steps, reconstructs)
    return report


def random_input_test(target, model, batches, spy, steps, reconstructs=False):
    """Train a copy briefly; compare its loss on the real inputs with its loss on random inputs."""
    label = T.label_slot(batches[0], spy)
    if label is None:
        return {"skipped": "could not tell the labels from the inputs in the batch"}
    if reconstructs:  # a conditional autoencoder: the class it is given barely moves a reconstruction of x from x
        return {"skipped": "the model reads the loss target itself (an autoencoder): randomising its other inputs "
                           "(a condition) says nothing about what the inputs carry"}
    if not any(p != label for p, _ in T.flatten(batches[0])):
        return {"skipped": "the loss target is the input itself (an autoencoder): no separate input to randomise"}
    try:
        m = copy.deepcopy(model)
        m.train(model.training)
        opt = target.make_optimizer(m.parameters())
        first = None
        t0 = time.monotonic()
        for i in range(steps):
            if T.short_train_over(t0, i):
                steps = i
                break
            b = batches[i % len(batches)]
            opt.zero_grad(set_to_none=True)
            loss = target.loss(m, b)
            loss.backward()
            opt.step()
            if first is None:
                first = loss.detach().float()
        torch.manual_seed(1234)
        seen = T.LossSpy()
        with torch.no_grad():
            m.eval()
            with seen:
                target.loss(m, batches[0])
            real = torch.stack([target.loss(m, b).detach().float() for b in batches]).mean()
            rand = torch.stack([target.loss(m, T.map_inputs(b, label, T.random_like)).detach().float()
                                for b in batches]).mean()
        first_v, real_v, rand_v = T.to_floats(first, real, rand)
    except Exception as e:  # noqa: BLE001 - the comparison is advisory; say why it did not run
        return {"skipped": f"{type(e).__name__}: {e}"[:300]}
    return {"steps": steps, "label_slot": label, "loss_before": first_v, "loss_real_inputs": real_v,
            "loss_random_inputs": rand_v, "loss_input_trained": trained_range(seen)}


def trained_range(spy):
    """What a binary cross-entropy with logits receives once the copy has trained: its range, and how many
    targets are 0 and 1. Trained logits of rows labelled 0 go below 0; values that cannot are probabilities."""
    if spy.name != "binary_cross_entropy_with_logits" or spy.input is None or not spy.input.numel():
        return None
    x, y = spy.input.float(), spy.target.float()
    lo, hi, zeros, ones = T.to_floats(x.min(), x.max(), (y <= 0.1).sum(), (y >= 0.9).sum())
    return {"min": lo, "max": hi, "n": x.numel(), "zeros": int(zeros), "ones": int(ones)}


if __name__ == "__main__":
    main(run)
