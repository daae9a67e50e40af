"""data_check: look at the batches the target trains on before blaming the model.

NaN/Inf in inputs, per-feature mean/std, label distribution, a single feature that predicts the label,
labels aligned with inputs (a copy trained on real labels vs one trained on permuted labels, scored on
a held-out batch), and the model's train/eval mode.
"""

import copy
import math
import time

import torch

import mltriage_rows as R
import mltriage_torch as T
from mltriage_init_loss import eval_mode_modules
from mltriage_io import UserCodeError, main
from mltriage_target import load_target


def _distinct_batches(target, n):
    out, seen = [], set()
    for b in target.batches(n):
        if id(b) not in seen:
            seen.add(id(b))
            out.append(b)
    return out


def channel_interleave(x: torch.Tensor, conv1d_channels=()) -> dict | None:
    """An image batch (N, C, H, W), C of 3 or 4, or a signal batch (N, C, L) that a Conv1d of C input channels
    reads: are neighbouring values along the last axis less alike than values C apart? An (N, H, W, C) array (or
    a time-major (T, C) stream cut into windows) reshaped or viewed to channels-first instead of permuted reads
    each step's channels side by side, so the same channel recurs every C steps. Correlation of x[..., :-k] with
    x[..., k:]."""
    if not x.is_floating_point():
        return None
    image = x.dim() == 4 and x.shape[1] in (3, 4) and x.shape[-1] >= 8
    signal = x.dim() == 3 and 2 <= x.shape[1] <= 16 and x.shape[1] in conv1d_channels and x.shape[-1] >= 4 * x.shape[1]
    if not (image or signal):
        return None
    c = int(x.shape[1])
    x = x[:64].float()

    def corr(k):
        a, b = x[..., :-k].reshape(-1), x[..., k:].reshape(-1)
        a, b = a - a.mean(), b - b.mean()
        return (a * b).sum() / (a.norm() * b.norm() + 1e-12)

    lag1, lag_c = T.to_floats(corr(1), corr(c))
    return {"channels": c, "lag1_corr": lag1, "lag_channels_corr": lag_c, "kind": "image" if image else "signal"}


UNIT = 0.05  # |mean| and |std - 1| under this: the values were standardised along that axis


def standardised_across_channels(x: torch.Tensor, conv1d_channels=()) -> dict | None:
    """A signal or image batch (N, C, L) / (N, C, H, W), or a sequence batch (N, T, F): were the statistics of a
    standardisation taken along another axis than the channels? Every index of that axis then has mean 0 and std 1,
    while each channel sits near one value of its own with almost no spread (a scaler fitted with axis=(0, 1) on
    channel-first windows computes one mean/std per time step across the channels: a 1,480 rpm channel and a 0.05 g
    vibration channel each become a near-constant offset, and the faults' variation is scaled away)."""
    if not x.is_floating_point() or x.dim() < 3 or x.shape[0] < 8:
        return None
    channel = 1 if (x.dim() == 4 or x.shape[1] in conv1d_channels) else x.dim() - 1
    if x.shape[channel] < 2:
        return None
    x = x[:1024].float()

    def stats(d):
        f = x.movedim(d, -1).reshape(-1, x.shape[d])
        return f.mean(0), f.std(0)

    cm, cs = stats(channel)
    for d in range(1, x.dim()):
        if d == channel or x.shape[d] < 4:
            continue
        m, s = stats(d)
        unit = ((m.abs() < UNIT) & ((s - 1).abs() < UNIT)).float().mean()
        v = T.to_floats(unit, cs.median(), cs.max(), cm.min(), cm.max(), cs.square().mean().sqrt())
        if v[0] >= 0.9:
            return {"standardised_axis": d, "channel_axis": channel, "channels": int(x.shape[channel]),
                    "channel_std_median": v[1], "channel_std_max": v[2], "channel_mean_range": [v[3], v[4]],
                    "channel_std_rms": v[5]}
    return None


def padding_in_scaler(x: torch.Tensor, conv1d_channels=()) -> dict | None:
    """A zero-padded sequence batch (N, T, F): were its features standardised with the padding counted in?

    Fitted over a padded array whose pad share is p, the mean of a feature with real values mu +- sigma is (1-p) mu
    and its variance (1-p) sigma^2 + p (1-p) mu^2; where sigma is small beside mu, every real value then lands
    near sqrt(p / (1-p)) (or its negative), whatever the feature, with a spread a fraction of that. Measured on the
    batch: the share of all-zero time steps p, and each feature's mean and std over the other steps."""
    if not x.is_floating_point() or x.dim() != 3 or x.shape[1] in conv1d_channels or x.shape[2] < 2:
        return None
    x = x[:1024].float()
    pad = (x == 0).all(-1)
    p = pad.float().mean()
    real = x[~pad]
    if real.shape[0] < 100 or not 0.2 <= float(p) <= 0.9:
        return None
    offset = torch.sqrt(p / (1 - p))
    m, s = real.mean(0), real.std(0)
    v = T.to_floats(p, offset, (m.abs() / offset).min(), (m.abs() / offset).max(), (s / m.abs().clamp_min(1e-12)).max())
    return {"pad_share": v[0], "offset": v[1], "feature_mean_over_offset": [v[2], v[3]], "max_std_over_mean": v[4],
            "features": int(x.shape[2])}


def _concat(ts):
    try:
        return torch.cat([t.detach() for t in ts]) if len(ts) > 1 else ts[0].detach()
    except RuntimeError:
        return ts[0].detach()


def feature_view(x: torch.Tensor) -> torch.Tensor:
    """(rows, features): columns of a table, channels of an image, the last dim of a sequence."""
    x = x.float()
    if x.dim() == 1:
        return x[:, None]
    if x.dim() == 4:
        return x.movedim(1, -1).reshape(-1, x.shape[1])
    return x.reshape(-1, x.shape[-1])


def leakage(x: torch.Tensor, y: torch.Tensor):
    """Per-feature share of the label explained by that feature alone (correlation ratio / r^2)."""
    if x.dim() != 2 or x.shape[0] != y.shape[0] or x.shape[0] < 8 or not x.is_floating_point():
        return None
    x = x.float()
    total = x.var(0, unbiased=False)
    if y.is_floating_point():
        yf = y.float().reshape(len(y), -1)[:, 0]
        xc, yc = x - x.mean(0), yf - yf.mean()
        r = (xc * yc[:, None]).mean(0) / (xc.std(0, unbiased=False) * yc.std(unbiased=False) + 1e-12)
        score = r ** 2
    else:
        yl = y.long().reshape(-1)
        classes = torch.unique(yl)
        within = torch.zeros_like(total)
        for c in classes:
            xc = x[yl == c]
            within += xc.var(0, unbiased=False) * xc.shape[0]
        score = 1 - within / x.shape[0] / (total + 1e-12)
        score = torch.where(total > 0, score, torch.zeros_like(score))
    return score


def settle_batchnorm(target, m, data) -> int:
    """Recompute m's BatchNorm running statistics as the plain average over `data` (train-mode forwards, no
    gradient), so a copy scored in eval mode is scored with statistics of the weights it has now.

    After a few dozen steps at a large LR the running averages (momentum 0.1) still mostly describe the weights of
    ten steps ago: the copy trained on real labels, whose weights moved most, then reads several times chance on the
    held-out batch while the permuted copy, which moved little, does not (dev `cell_phenotype_resnet`: 6.6 against
    1.8, the same spike its own log shows after its first epoch). Recomputing the statistics over the training
    batches is "precise BN" (Wu & Johnson, "Rethinking 'Batch' in BatchNorm", 2021). Returns the layers settled."""
    was = m.training
    m.train()
    # only the layers that train mode updates: a frozen backbone kept in eval mode by the model's own train()
    # normalises with its loaded statistics, which no forward pass here would restore once reset
    bns = [b for b in m.modules() if isinstance(b, torch.nn.modules.batchnorm._BatchNorm) and b.track_running_stats
           and b.training]
    if not bns or not data:
        m.train(was)
        return 0
    momenta = [b.momentum for b in bns]
    for b in bns:
        b.reset_running_stats()
        b.momentum = None  # a cumulative average: every batch weighs the same
    try:
        with torch.no_grad():
            for b in data:
                target.loss(m, b)
    finally:
        for b, mom in zip(bns, momenta):
            b.momentum = mom
        m.train(was)
    return len(bns)


def alignment(target, model, batches, label, steps, lr_scale=1.0):
    """Held-out loss of a copy trained on the real labels vs a copy trained on permuted labels (each at the user's
    LR times lr_scale: at an LR too small to learn, neither copy learns and the comparison says nothing)."""
    if len(batches) < 3:
        return {"skipped": "needs at least 3 distinct batches (2 to train, 1 held out)"}
    train, held = batches[:-1], batches[-1]
    g = torch.Generator().manual_seed(0)

    def permuted(b):
        return T.replace_at(b, label, lambda y: y[torch.randperm(y.shape[0], generator=g).to(y.device)])

    perm_train = [permuted(b) for b in train]
    requested = steps
    state = copy.deepcopy(model.state_dict())
    results = {}
    for kind, data in (("real", train), ("permuted", perm_train)):
        m = copy.deepcopy(model)
        m.load_state_dict(state)
        m.train()
        opt = target.make_optimizer(m.parameters())
        for group in opt.param_groups:
            group["lr"] = group["lr"] * lr_scale
        first = last = None
        t0 = time.monotonic()
        for i in range(steps):
            if kind == "real" and T.short_train_over(t0, i):
                steps = i  # a heavy model: the permuted copy trains exactly as many steps, the comparison stays fair
                break
            opt.zero_grad(set_to_none=True)
            loss = target.loss(m, data[i % len(data)])
            loss.backward()
            opt.step()
            first = loss.detach().float() if first is None else first
            last = loss.detach().float()
        settle_batchnorm(target, m, data[:steps] if steps else data)
        m.eval()
        with torch.no_grad():
            held_loss = target.loss(m, held).detach().float()
        results[kind] = (first, last, held_loss)
    with torch.no_grad():
        model_was = model.training
        m0 = copy.deepcopy(model)  # as built: its statistics are part of what "at init" means to the rules
        m0.eval()
        init_held = target.loss(m0, held).detach().float()
        model.train(model_was)
    v = T.to_floats(*results["real"], *results["permuted"], init_held)
    return {"steps": steps, "cut_short": steps < requested, "train_batches": len(train), "held_out_loss_at_init": v[6],
            "real": {"first_loss": v[0], "last_train_loss": v[1], "held_out_loss": v[2]},
            "permuted": {"first_loss": v[3], "last_train_loss": v[4], "held_out_loss": v[5]}}


class _FirstLoss(T.LossSpy):
    """Keeps the first standard loss call's function, target and other arguments, to call it again on a constant."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.name is None and getattr(func, "__name__", "") in T.LOSSES:
            self.call = (func, args, kwargs or {})
        return super().__torch_function__(func, types, args, kwargs)


PRIOR_ELEMENTS = 2 ** 24  # predictions kept for fitting the constant (a 50k-token vocabulary: ~330 rows)
PRIOR_SECONDS = 5.0


def _loss_calls(target, model, batches, seconds=math.inf) -> tuple[list, str | None, dict | None]:
    """The first standard loss call (function, arguments, prediction shape and device, target) of each batch, with
    the loss's name; or a {"skipped": why} instead of the calls. Stops after `seconds` (the model runs on each)."""
    calls, seen, name, t0 = [], 0, None, time.monotonic()
    with torch.no_grad():
        for b in batches:
            if calls and time.monotonic() - t0 > seconds:
                break
            spy = _FirstLoss()
            with spy:
                target.loss(model, b)
            if spy.name is None:
                return [], None, {"skipped": "the loss calls no standard torch loss function (cross_entropy, mse_loss, ...)"}
            name = spy.name
            func, args, kwargs = spy.call
            if kwargs.get("reduction") == "sum" or kwargs.get("size_average") is False:
                return [], name, {"skipped": f"{spy.name} sums over the batch: its prior would be on another scale"}
            args = list(args)
            pred = args[0] if args and isinstance(args[0], torch.Tensor) else kwargs.get("input")
            tgt = args[1] if len(args) > 1 and isinstance(args[1], torch.Tensor) else kwargs.get("target")
            if not isinstance(pred, torch.Tensor) or not isinstance(tgt, torch.Tensor) or pred.dim() < 1 \
                    or not pred.is_floating_point():
                return [], name, {"skipped": f"{spy.name} was not called with a prediction and a target tensor"}
            calls.append((func, args, kwargs, pred.shape, pred.device, tgt.float() if tgt.is_floating_point() else tgt))
            seen += pred.numel()
            if seen >= PRIOR_ELEMENTS:
                break  # a language model's (rows, vocabulary) logits: a few batches give the token frequencies
    return calls, name, None


def validation_loader(target):
    """The one loader the factory built beside the training data (over another dataset), with where it was built;
    None when it built none or several (a validation and a test loader: which one the log reports is unknown)."""
    train = target.data
    train_ds = getattr(train, "dataset", None)
    others = [(ld, where) for ld, where in getattr(target, "loaders", [])
              if ld is not train and getattr(ld, "dataset", None) is not train_ds]
    return others[0] if len(others) == 1 else None


VAL_PRIOR_ROWS = 20_000  # validation rows scored with the constant (a noisy target needs them all: see label_prior)


def label_prior(target, model, batches, iters=100):
    """The loss of a stand-in that ignores its inputs: the target's first standard loss call (cross_entropy,
    mse_loss, ...) with its prediction replaced by one learnt constant per output position, fitted over the
    training batches. That is the label prior under the user's own loss: the entropy of the class frequencies under
    a cross-entropy, the targets' variance under a squared error. A copy trained on permuted labels only
    approaches it (it memorises some noise, and is scored on one batch).

    The run's validation is compared with it, so where the factory built a validation loader the constant is
    scored there, on every row up to VAL_PRIOR_ROWS: a weak-signal target's model beats the constant by 2-3%,
    and the base rate of 4,000 training rows alone can sit 3% off the validation set's (dev ad_click_ctr_mlp:
    0.329 on its training batches, 0.358 on its validation set)."""
    m = copy.deepcopy(model)
    m.eval()
    calls, name, skipped = _loss_calls(target, m, batches)
    if skipped:
        return skipped
    if any(c[3][1:] != calls[0][3][1:] for c in calls):
        return {"skipped": "the prediction changes shape beyond its batch dimension from batch to batch"}
    const = torch.zeros(calls[0][3][1:], device=calls[0][4], requires_grad=True)

    def mean_loss(over):
        total = 0.0
        for func, args, kwargs, shape, _, tgt in over:
            kw = {k: v for k, v in kwargs.items() if k not in ("input", "target", "reduction", "size_average", "reduce")}
            out = func(const.expand(shape), tgt, *[a.detach() if isinstance(a, torch.Tensor) else a
                                                  for a in args[2:]], **kw)
            total = total + out.float().mean()
        return total / len(over)

    with torch.no_grad():
        first = mean_loss(calls)
    opt = torch.optim.LBFGS([const], lr=1, max_iter=10, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = mean_loss(calls)
        loss.backward()
        return loss

    t0, prev = time.monotonic(), math.inf
    for _ in range(iters // 10):  # in rounds, so a large vocabulary's logits cannot hold the probe up
        loss = float(opt.step(closure).detach())
        if abs(prev - loss) <= 1e-7 * abs(loss) or time.monotonic() - t0 > PRIOR_SECONDS:
            break
        prev = loss
    with torch.no_grad():
        v = T.to_floats(first, mean_loss(calls))
    out = {"loss": v[1], "loss_at_zero_output": v[0], "loss_fn": name, "batches": len(calls),
           "scored_on": "training batches"}
    val = validation_loader(target)
    if val is None:
        return out
    loader, where = val
    try:
        ds, per = loader.dataset, getattr(loader, "batch_size", None) or 64
        # rows in a random order, so the batches scored before the time runs out are a sample of the whole set
        idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(0))[:VAL_PRIOR_ROWS].tolist()
        batches_v = (loader.collate_fn([ds[i] for i in idx[j:j + per]]) for j in range(0, len(idx), per))
        vcalls, _, vskip = _loss_calls(target, m, batches_v, 2 * PRIOR_SECONDS)
        rows = sum(c[3][0] for c in vcalls) if vcalls and len(vcalls[0][3]) else len(vcalls)
        if vskip or not vcalls or any(c[3][1:] != calls[0][3][1:] for c in vcalls):
            return {**out, "validation_note": (vskip or {}).get("skipped", "its predictions have another shape")}
        with torch.no_grad():
            scored = T.to_floats(mean_loss(vcalls))[0]
    except Exception as e:  # noqa: BLE001 - an iterable dataset, a collate that needs its sampler: training's stands
        return {**out, "validation_note": f"{type(e).__name__}: {e}"[:200]}
    # rows are weighed by batch (the last one may be short), as the run's own mean over batches does
    return {**out, "loss": scored, "fit_loss": v[1], "scored_on": f"validation loader built at {where}",
            "validation_rows": rows}


def same_content(batches) -> dict | None:
    """How many of the data's batches equal the first one, tensor for tensor (next(iter(loader)) every step)."""
    if len(batches) < 3:
        return None
    first = [t for _, t in T.flatten(batches[0])]
    same = sum(all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(first, [t for _, t in T.flatten(x)]))
               for x in batches[1:])
    return {"batches": len(batches), "equal_to_first": same + 1}


def lengths_match_padding(batches, label=None) -> dict | None:
    """Per-row lengths (a 1-D integer tensor, one per row) against the right padding of a (rows, time) integer
    tensor in the same batch: sorting the lengths without reordering the rows hands each row another's length.
    The loss's target (`label`, a flatten path) is class ids, not lengths, however small its values."""
    rows = mismatched = 0
    permuted, where = True, None
    for b in batches:
        ts = T.flatten(b, "batch")
        tokens = [(p, t) for p, t in ts if t.dim() == 2 and not t.is_floating_point() and t.shape[1] > 1]
        for lp, lens in ts:
            if lens.dim() != 1 or lens.is_floating_point() or lens.numel() < 4 or (label and lp == "batch" + label):
                continue
            for tp, x in tokens:
                if x.shape[0] != lens.shape[0] or int(lens.min()) < 1 or int(lens.max()) > x.shape[1]:
                    continue
                pad = int(torch.mode(x[:, -1]).values)  # the shortest rows end in padding
                is_pad = (x == pad).flip(1).long().cumprod(1)  # trailing run of pad per row
                content = x.shape[1] - is_pad.sum(1)
                if bool((content == x.shape[1]).all()):
                    continue  # no right padding (left-padded or full rows): nothing to compare
                lens = lens.to(content.device).long()
                rows += len(lens)
                mismatched += int((content != lens).sum())
                permuted &= bool(torch.equal(content.sort().values, lens.sort().values))
                where = where or {"tokens": tp, "lengths": lp, "pad": pad,
                                  "first_rows": [[int(c), int(n)] for c, n in zip(content[:4], lens[:4])]}
                break
    if not rows:
        return None
    return {"rows": rows, "mismatched": mismatched, "same_lengths_other_rows": permuted, **(where or {})}


def pad_id_inside(batches, fed: dict) -> dict | None:
    """How often an embedding's padding_idx sits between real tokens of the (rows, time) input it reads (`fed`:
    path -> pad id). Padding fills the ends of rows (right or left), so a pad id inside a row is a real token
    encoded with the pad's id
    (a vocabulary enumerated from 0 while 0 is reserved for padding). Its embedding then stays at zero, and any
    mask built as tokens != pad drops it."""
    if not fed:
        return None
    seen: dict = {}
    for b in batches:
        for path, x in T.flatten(b, "batch"):
            if path not in fed or x.dim() != 2 or x.is_floating_point() or x.shape[1] < 3:
                continue
            pos = torch.arange(x.shape[1], device=x.device).expand_as(x)
            pad = fed[path]
            real = x != pad
            first = torch.where(real, pos, x.shape[1]).min(1).values
            last = torch.where(real, pos, -1).max(1).values
            inside = (pos > first[:, None]) & (pos < last[:, None])
            n_inside = (inside & ~real).sum(1)
            e = seen.setdefault((path, pad), {"input": path, "pad": pad, "rows": 0, "rows_with": 0,
                                              "inside": 0, "span": 0})
            e["rows"] += x.shape[0]
            e["rows_with"] += int((n_inside > 0).sum())
            e["inside"] += int(n_inside.sum())
            e["span"] += int(inside.sum())
    found = [{**e, "share": e["inside"] / e["span"], "rows_share": e["rows_with"] / e["rows"]}
             for e in seen.values() if e["span"]]
    return max(found, key=lambda e: e["share"]) if found else None


def _padding(x: torch.Tensor):
    """(side, content length per row) of a padded sequence tensor: integer (rows, time) whose pad id sits only in
    one run at the right or left end of rows, or float (rows, time, features) padded with all-zero steps; None when
    it is not padded (fixed-length windows, text whose most common token also ends rows)."""
    if x.dim() == 2 and not x.is_floating_point() and x.dtype != torch.bool:
        ends = {"right": x[:, -1], "left": x[:, 0]}
        is_pad = {side: x == torch.mode(e).values for side, e in ends.items()}
    elif x.dim() == 3 and x.is_floating_point():
        is_pad = dict.fromkeys(("right", "left"), (x == 0).all(-1))
    else:
        return None
    rows, steps = x.shape[:2]
    if rows < 4 or steps < 4:
        return None
    for side, pad in is_pad.items():
        run = (pad.flip(1) if side == "right" else pad).long().cumprod(1).sum(1)
        content = steps - run
        padded = int((run > 0).sum())
        # padding is only ever at the end of rows; rows of several lengths, a quarter of them padded at least
        if int(pad.sum()) <= int(run.sum()) * 1.01 and padded >= rows / 4 and int(content.min()) >= 1 \
                and int(content.max()) > int(content.min()):
            return side, content
    return None


def padding_read(target, model, batches, label) -> dict | None:
    """Does the model's output for a row change when only its padding changes? The short rows of a padded batch,
    fed once as they come and once with the padding cut to their longest content (every tensor aligned with the
    time axis cut the same way): a model that masks, packs or gathers at each row's length gives the same output
    both times; one that pools over pads, reads the last padded step or lets pads into attention does not.
    The change is relative to how much outputs differ between rows."""
    lab = label or ""
    for b in batches:
        found = next(((p, t, pad) for p, t in T.flatten(b) if p != lab and (pad := _padding(t)) is not None), None)
        if found:
            break
    else:
        return None
    path, x, (side, content) = found
    rows, steps = x.shape[:2]
    order = content.argsort()
    keep = order[: max(2, int((content <= steps // 2).sum()))].sort().values  # rows in their order: a batch
    # sorted by length for pack_padded_sequence stays sorted
    width = int(content[keep].max())
    if width >= steps:
        return None

    def cut(t, p):
        if t.dim() == 0 or t.shape[0] != rows:
            return t
        t = t[keep.to(t.device)]
        if t.dim() >= 2 and t.shape[1] == steps:  # inputs, masks, per-step labels alike
            t = t[:, :width] if side == "right" else t[:, steps - width:]
        return t

    full = T._map_tensors(b, lambda t, p: t[keep.to(t.device)] if t.dim() and t.shape[0] == rows else t)
    short = T._map_tensors(b, cut)
    m = copy.deepcopy(model)
    m.eval()
    preds = []
    # the full rows twice, under two seeds: a loss function that draws random numbers per call (token dropout,
    # noise added to the inputs) moves the output by itself, and cut rows draw other numbers than full ones
    for batch, seed in ((full, 0), (short, 0), (full, 1)):
        spy = T.LossSpy()
        torch.manual_seed(seed)
        with torch.no_grad(), spy:
            target.loss(m, batch)
        if spy.input is None or not spy.input.is_floating_point():
            return {"skipped": "the loss calls no standard torch loss function on a float prediction"}
        preds.append(spy.input.float())
    a, c, again = preds
    n = len(keep)
    if a.shape != c.shape:  # per-position outputs: compare each row's content positions
        try:
            a, c, again = a.reshape(n, steps, -1), c.reshape(n, width, -1), again.reshape(n, steps, -1)
        except RuntimeError:
            return {"skipped": f"the prediction's shape {list(a.shape)} does not follow the rows and time steps"}
        kept = slice(0, width) if side == "right" else slice(steps - width, steps)  # the steps cut rows keep
        a, again = a[:, kept], again[:, kept]
        pos = torch.arange(width)
        mine = content[keep].to(pos.device)[:, None]
        real = (pos[None] < mine) if side == "right" else (pos[None] >= width - mine)
        a, c, again = a[real], c[real], again[real]
    spread = (a - a.mean(0)).norm()
    scale = spread if float(spread) > 1e-6 * float(a.norm()) else a.norm()
    v = T.to_floats((c - a).norm() / scale.clamp(min=1e-12), (again - a).norm() / scale.clamp(min=1e-12))
    return {"tensor": "batch" + path, "side": side, "rows": n, "steps": steps, "cut_to": width,
            "output_change": v[0], "loss_noise": v[1], "forward": _forward_of(model),
            "forward_name": f"{type(model).__name__}.forward"}


def _predictions(target, m, batch):
    """The float prediction the loss compares with its target, in eval mode and one seed (None if no standard loss
    function sees a float prediction)."""
    spy = T.LossSpy()
    torch.manual_seed(0)
    with torch.no_grad(), spy:
        target.loss(m, batch)
    return spy.input.float() if spy.input is not None and spy.input.is_floating_point() else None


def _by_step(pred: torch.Tensor, rows: int, steps: int) -> torch.Tensor | None:
    """The prediction as (rows, steps, rest): (B, T), (B, T, V), (B*T, V), or cross-entropy's (B, V, T)."""
    if pred.dim() == 3 and pred.shape[0] == rows and pred.shape[2] == steps and pred.shape[1] != steps:
        pred = pred.transpose(1, 2)
    if pred.numel() % (rows * steps) or (pred.shape[0] not in (rows, rows * steps)):
        return None
    return pred.reshape(rows, steps, -1)


def target_read_ahead(target, model, batches, label) -> dict | None:
    """Does the prediction at a step read the target of that step or a later one? A sequence target handed to the
    model (teacher forcing: the decoder's input at step t is the target at t-1) is changed at one step t, in eval
    mode: a decoder fed the targets shifted the right way changes its outputs after t only; one fed them shifted
    the wrong way (torch.roll(y, -1), a shift forgotten) changes its output at t or before it, so training lets it
    copy the answer, and at inference, fed its own predictions, it has nothing to copy."""
    if label is None:
        return None
    b = batches[0]
    flat = T.flatten(b)
    paths = [p for p, _ in flat]
    if len(flat) < 2 or paths[0] == label or label not in paths:
        return None  # the first tensor is the model's input: an autoencoder's target is its input, by design
    y = dict(flat)[label]
    rows = y.shape[0] if y.dim() else 0
    if y.dim() < 2 or y.shape[1] < 4 or rows < 2:
        return None  # a label per row has no steps to read ahead of
    steps = y.shape[1]
    m = copy.deepcopy(model)
    m.eval()
    base = _predictions(target, m, b)
    if base is None:
        return {"skipped": "the loss calls no standard torch loss function on a float prediction"}
    p0 = _by_step(base, rows, steps)
    if p0 is None:
        return {"skipped": f"the prediction's shape {list(base.shape)} does not follow the target's rows and steps"}
    scale = float(p0.std()) or 1.0
    worst = None
    for t in (steps // 4, steps // 2, (3 * steps) // 4):
        def bump(x, p, t=t):
            if p != label:
                return x
            x = x.clone()
            if x.is_floating_point():
                x[:, t] = x[:, t] + 3 * x.float().std().clamp(min=1e-3).to(x.dtype)
            else:
                top = max(int(x.max()) + 1, 2)
                x[:, t] = torch.where(x[:, t] >= 0, (x[:, t] + 1) % top, x[:, t])  # ignore_index stays
            return x
        moved = _predictions(target, m, T._map_tensors(b, bump))
        p1 = _by_step(moved, rows, steps) if moved is not None and moved.shape == base.shape else None
        if p1 is None:
            return None
        d = (p1 - p0).abs()
        before, after = T.to_floats(d[:, :t + 1].max() / scale, d[:, t + 1:].max() / scale if t + 1 < steps else 0.0)
        if worst is None or before > worst["before"]:
            worst = {"step": t, "before": before, "after": after}
    return {"tensor": "batch" + label, "steps": steps, "rows": rows, **worst,
            "forward": _forward_of(model), "forward_name": f"{type(model).__name__}.forward"}


def _forward_of(model) -> str | None:
    """file:line of the model's forward, where its readout of the sequence is written."""
    import inspect

    fwd = type(model).forward
    try:
        file, line = inspect.getsourcefile(fwd), inspect.getsourcelines(fwd)[1]
    except (OSError, TypeError):
        return None
    if not file or "site-packages" in file or "/torch/" in file:
        return None  # nn.Sequential and the like: the readout is in a module of the user's, not here
    return f"{file}:{line}"


ROWS_LOAD_S = 20.0  # a factory slower than this is not loaded twice: the other checks need the probe's time


def rows_keep_labels(a, tables, target, batches, label):
    """Run the factory again on coded tables (mltriage_rows): do the batch rows keep their own labels?"""
    first = [T.flatten(b, "batch") for b in batches]
    y = torch.cat([dict(b)[f"batch{label}"].reshape(-1) for b in first])
    plan = R.Plan(tables, R.label_values(y, target.num_classes))
    with R.reads(plan, [], a["workspace"]) as coded:
        try:
            again = load_target(a["target"], a["workspace"])
            second = [T.flatten(b, "batch") for b in _distinct_batches(again, len(batches))]
        except UserCodeError as e:
            if isinstance(e.__cause__, R.WritesFiles):
                return {"skipped": f"{e.__cause__}: not run on coded tables"}
            raise
    if not coded[0]:
        return {"skipped": "no table column could be coded (or the factory reads its tables once, at import)"}
    out = R.kept_labels(first, second, f"batch{label}")
    if out is None:
        return {"skipped": "the labels are not classes or coded values"}
    return {**out, "tables": plan.provenance(tables)[:8]}


def batch_mixing(ys: list) -> dict | None:
    """Do the training batches mix the labels like a shuffle would? Per batch, the total-variation distance of
    its class mix from the pooled one (for a regression target: its variance over the pooled variance), against
    the same statistic for the pooled labels shuffled into batches of the same sizes. Batches cut from rows
    sorted by class (or target), with only the batch order shuffled, sit far from the shuffled baseline."""
    if len(ys) < 3 or any(y.dim() != 1 or y.shape[0] < 8 for y in ys):
        return None
    sizes = [int(y.shape[0]) for y in ys]
    pooled = torch.cat([y.detach() for y in ys])
    if pooled.is_floating_point() and torch.isfinite(pooled).all() and bool((pooled == pooled.round()).all()) \
            and len(pooled.unique()) <= 50:
        pooled = pooled.long()  # 0/1 targets of a BCE loss are classes
    regression = pooled.is_floating_point()
    if not regression and (pooled.min() < 0 or len(pooled.unique()) < 2):
        return None

    def stat(labels):
        parts = labels.split(sizes)
        if regression:
            var = labels.float().var().clamp_min(1e-12)
            return float(sum(p.float().var() for p in parts) / len(parts) / var)
        c = int(labels.max()) + 1
        p = torch.bincount(labels.long(), minlength=c).float() / len(labels)
        return float(sum(0.5 * (torch.bincount(q.long(), minlength=c).float() / len(q) - p).abs().sum()
                         for q in parts) / len(parts))

    g = torch.Generator().manual_seed(0)
    base = sum(stat(pooled[torch.randperm(len(pooled), generator=g)]) for _ in range(5)) / 5
    out = {"batches": len(ys), "rows": sizes[0], "regression": regression, "stat": stat(pooled), "shuffled": base}
    if not regression:
        out["classes"] = int(len(pooled.unique()))
        out["classes_per_batch"] = sorted(int(len(y.unique())) for y in ys)[len(ys) // 2]
    return out


# how far a loader's inputs may sit from the training batches' before they are "prepared differently": healthy
# validation splits of the dev gallery sit within 0.1 training SDs (median over features), spread within 0.9-1.1x
SHIFT_MATCH, SHIFT_APART, SPREAD_APART = 0.3, 1.0, 3.0
# augmentation noise on one feature (two reads of the same rows apart) this many times that feature's spread in a
# loader that does not augment: the augmentation drowns the feature (healthy jitter on standardised inputs: ~0.1x;
# a random crop or shift moves a pixel or a step by about its own spread: ~1x)
AUG_SWAMPS = 3.0


CLASS_ROWS = 10  # a class needs this many rows in the batches read for its frequency to be judged


def class_weight_order(weight: torch.Tensor, y: torch.Tensor) -> dict | None:
    """Per-class loss weights against the classes' frequencies in the batches read. Weights meant to balance the
    classes fall with frequency (1/n, 1/sqrt(n), ...); weights whose values fit such a law once sorted, but are
    handed to the classes in another order (a value_counts() order against the label encoding), do not.
    `fit`: the power law fitted to the sorted pairs (its largest miss, as a ratio); `assigned`: the largest ratio
    between a class's weight and what the law gives its frequency; `rank_corr`: Spearman of weight vs frequency."""
    w = weight.reshape(-1).float()
    y = y.reshape(-1).long()
    y = y[(y >= 0) & (y < len(w))]  # ignore_index (-100: a tagger's padding) is no class
    counts = torch.bincount(y, minlength=len(w))[:len(w)].float()
    use = (counts >= CLASS_ROWS) & (w > 0)
    if int(use.sum()) < 3 or len(w) < 3:
        return None
    w, n = w[use], counts[use]
    if float(w.max() / w.min()) < 2:
        return None  # near-uniform weights: nothing to be in the wrong order
    lw, ln = w.log(), n.log()

    def law(lw_, ln_):  # least squares lw = a - p * ln
        A = torch.stack([torch.ones_like(ln_), -ln_], 1)
        a, pw = torch.linalg.lstsq(A, lw_.unsqueeze(1)).solution.reshape(-1).tolist()
        return a, pw

    a, pw = law(lw.sort(descending=True).values, ln.sort().values)
    sorted_miss = float((lw.sort(descending=True).values - (a - pw * ln.sort().values)).abs().max().exp())
    assigned = float((lw - (a - pw * ln)).abs().max().exp())
    rank = lambda v: v.argsort().argsort().float()
    rw, rn = rank(w), rank(n)
    rho = float(((rw - rw.mean()) * (rn - rn.mean())).sum() / ((rw - rw.mean()).norm() * (rn - rn.mean()).norm()))
    most, least = int(n.argmax()), int(n.argmin())
    classes = use.nonzero().reshape(-1).tolist()
    return {"classes": len(classes), "power": pw, "fit": sorted_miss, "assigned": assigned, "rank_corr": rho,
            "most_frequent": {"class": classes[most], "share": float(n[most] / n.sum()), "weight": float(w[most])},
            "least_frequent": {"class": classes[least], "share": float(n[least] / n.sum()), "weight": float(w[least])}}


def _loader_batches(loader, rows=256, per=64):
    """Up to `rows` samples spread over a map-style loader's dataset, collated by the loader's own collate_fn
    (its padding included), without its sampler, workers or shuffling."""
    ds = loader.dataset
    n = len(ds)
    if n < 8:
        return []
    idx = torch.linspace(0, n - 1, min(n, rows)).long().tolist()
    collate = loader.collate_fn
    return [collate([ds[i] for i in idx[j:j + per]]) for j in range(0, len(idx), per)]


def _feature_stats(ts):
    f = torch.cat([feature_view(t.detach()) for t in ts])
    f = torch.where(torch.isfinite(f), f, torch.zeros(()))
    return f.mean(0), f.std(0)


def _read(loader) -> dict:
    flat: dict = {}
    for b in _loader_batches(loader):
        for path, t in T.flatten(b, "batch"):
            flat.setdefault(path, []).append(t)
    return flat


def _read_noise(first, second) -> torch.Tensor | None:
    """Per feature, the SD of what changes between two reads of the same rows (0 where the reads agree)."""
    if not first or not second or len(first) != len(second) or not first[0].is_floating_point() \
            or any(x.shape != y.shape for x, y in zip(first, second)):
        return None
    d = torch.cat([feature_view(x.detach()) - feature_view(y.detach()) for x, y in zip(first, second)])
    d = torch.where(torch.isfinite(d), d, torch.zeros(()))
    return d.pow(2).mean(0).sqrt() / math.sqrt(2)


def augmentation_swamps(reads, path) -> dict | None:
    """A loader that augments (two reads of the same rows differ) beside one that does not: the feature whose
    augmentation noise is largest against that feature's spread in the clean loader, when it is AUG_SWAMPS or more
    (dev `icu_vitals_gru_deterioration`: jitter and gain meant for standardised units applied to raw SpO2, a
    fraction with SD 0.012, before the z-scoring: 8x its spread). A validation window that merely varies less than
    training (a seasonal feature over two weeks) is no augmentation and is not read here."""
    noisy, clean = [], []
    for loader, where, first, second in reads:
        noise = _read_noise(first.get(path), second.get(path))
        if noise is not None:
            (noisy if bool((noise > 0).any()) else clean).append((loader, where, first[path], noise))
    best = None
    for loader, where, _, noise in noisy:
        for cl, cwhere, rows, _ in clean:
            sd = _feature_stats(rows)[1]
            if sd.shape != noise.shape:
                continue
            ratio = torch.where(sd > 0, noise / sd.clamp_min(1e-30), torch.zeros(()))
            i = int(ratio.argmax())
            r = float(ratio[i])
            if r >= AUG_SWAMPS and (best is None or r > best["noise_over_clean_sd"]):
                best = {"input": path, "feature": i, "features": int(sd.numel()), "noise_over_clean_sd": r,
                        "noise_sd": float(noise[i]), "clean_sd": float(sd[i]), "where": where,
                        "dataset": type(loader.dataset).__name__, "clean_where": cwhere,
                        "clean_dataset": type(cl.dataset).__name__}
    return best


def _pooled_shift(ts, other) -> tuple[float, float]:
    """How far `other`'s values sit from `ts`'s, every value of every column pooled: (mean shift in SDs, SD ratio)."""
    a = torch.cat([t.detach().reshape(-1).float() for t in ts])
    b = torch.cat([t.detach().reshape(-1).float() for t in other])
    a, b = a[torch.isfinite(a)], b[torch.isfinite(b)]
    sd = float(a.std()) if len(a) > 1 else 0.0
    if sd <= 0 or len(b) < 2:
        return 0.0, 1.0
    return abs(float(b.mean() - a.mean())) / sd, float(b.std()) / sd


CLIP_PILE, CLIP_BEYOND = 0.2, 0.1


def clipped_in_training(ts, reads, path) -> dict | None:
    """Training samples piled up at one bound (CLIP_PILE of a sample's values exactly at its minimum or maximum,
    the same value in a quarter of the samples or more) that another loader's values cross (CLIP_BEYOND of them
    beyond it): a clamp runs on one side only, in units it was not written for (dev `solar_cell_el_defect_cnn`: a
    brightness/contrast jitter that clamps to [0, 1], placed after Normalize, zeroes every below-average pixel of
    80% of the training images). A black background piles up in every split alike, and a cutout that writes the
    mean sits inside each sample's range: neither crosses."""
    xs = [t.detach().float().reshape(len(t), -1) for t in ts if t.dim() >= 2 and t.shape[0] > 0]
    if not xs or len({x.shape[1] for x in xs}) != 1 or xs[0].shape[1] < 16:
        return None
    x = torch.cat(xs)
    others = []  # each loader's finite values, flattened once for both sides
    for loader, where, flat, _ in reads:
        b = [t.detach().reshape(-1).float() for t in flat.get(path, []) if t.is_floating_point()]
        b = torch.cat(b) if b else torch.zeros(0)
        others.append((loader, where, b[torch.isfinite(b)]))
    best = None
    for side in ("min", "max"):
        ext = x.min(1).values if side == "min" else x.max(1).values
        piled = (x == ext[:, None]).float().mean(1) >= CLIP_PILE
        if float(piled.float().mean()) < 0.25 or not bool(torch.isfinite(ext[piled]).all()):
            continue
        bound = ext[piled].mode().values
        at = piled & (ext == bound)
        if float(at.float().mean()) < 0.25:
            continue
        pile = float((x[at] == bound).float().mean())
        for loader, where, b in others:
            beyond = float(((b < bound) if side == "min" else (b > bound)).float().mean()) if len(b) else 0.0
            if beyond >= CLIP_BEYOND and (best is None or beyond > best["beyond"]):
                best = {"input": path, "side": side, "bound": float(bound), "samples": float(at.float().mean()),
                        "pile": pile, "beyond": beyond, "where": where, "dataset": type(loader.dataset).__name__,
                        "rows": len(loader.dataset), "other_range": [float(b.min()), float(b.max())]}
    return best


ALIGNED_ELSEWHERE, MISALIGNED_SHARE = 0.3, 0.5


def _sample_corr(xs, ys) -> float | None:
    """Median over samples of the correlation between a sample's input values and its same-shaped target's."""
    rs = []
    for x, y in zip(xs, ys):
        if x.shape != y.shape or len(x) == 0:
            continue
        a, b = x.detach().float().reshape(len(x), -1), y.detach().float().reshape(len(y), -1)
        a, b = a - a.mean(1, keepdim=True), b - b.mean(1, keepdim=True)
        rs.append((a * b).sum(1) / (a.norm(dim=1) * b.norm(dim=1)).clamp_min(1e-12))
    r = torch.cat(rs) if rs else torch.zeros(0)
    r = r[torch.isfinite(r)]
    return float(r.median()) if len(r) >= 8 else None


def misaligned_targets(tensors: dict, label_key, reads) -> dict | None:
    """A target shaped like its input (a denoiser's clean image, a segmentation mask, a forecast window) that lines
    up with the input in another loader but not in training: an augmentation (a flip, a roll, a crop) moved one and
    not the other (dev `micrograph_texture_denoising_conv_ae`: the augmented patch noised as input, the un-augmented
    patch returned as target: per-sample correlation 0.01 in training, 0.61 in validation)."""
    ys = tensors.get(label_key) if label_key else None
    if not ys or not ys[0].is_floating_point() or ys[0].dim() < 2:
        return None
    best = None
    for path, xs in tensors.items():
        if path == label_key or not xs[0].is_floating_point() or xs[0].shape[1:] != ys[0].shape[1:]:
            continue
        train = _sample_corr(xs, ys)
        if train is None:
            continue
        for loader, where, flat, _ in reads:
            other = _sample_corr(flat.get(path, []), flat.get(label_key, []))
            if other is None or other < ALIGNED_ELSEWHERE or train > MISALIGNED_SHARE * other \
                    or other - train < 0.25:
                continue
            if best is None or other - train > best["aligned"] - best["train"]:
                best = {"input": path, "target": label_key, "train": train, "aligned": other, "where": where,
                        "dataset": type(loader.dataset).__name__}
    return best


def split_shift(target, tensors: dict, label_key) -> dict | None:
    """Are the loaders the factory built fed the same way as training? Each float input's per-feature mean and
    spread in every loader (read through its own collate_fn) against the training batches': one loader matches
    (the training one), another whose inputs sit far off is prepared differently (a scaler fitted on training
    and never applied to validation, a /255 on one side only). None when fewer than two loaders could be read."""
    reads, errors = [], []
    for loader, where in getattr(target, "loaders", [])[:4]:
        try:
            reads.append((loader, where, _read(loader), _read(loader)))  # twice: does the loader augment?
        except Exception as e:  # noqa: BLE001 - an iterable dataset, a collate that needs the sampler: not read
            errors.append(f"{where}: {type(e).__name__}: {e}"[:200])
    if len(reads) < 2:
        return {"skipped": f"{len(reads)} loader(s) read", "errors": errors[:2]} if errors else None
    out = []
    for path, ts in tensors.items():
        # an autoencoder's target is its input: compared as an input; a regression target is compared too (a
        # target standardised or log-transformed on one split only)
        is_target = path == label_key and len(tensors) > 1
        if not ts[0].is_floating_point() or ts[0].dim() < 2 and not is_target:
            continue
        mu, sd = _feature_stats(ts)
        live = sd > 1e-6 * (1 + mu.abs())
        if not bool(live.any()):
            continue
        for i, (loader, where, flat, _) in enumerate(reads):
            other = [t for t in flat.get(path, []) if t.is_floating_point() and t.shape[1:] == ts[0].shape[1:]
                     or t.is_floating_point() and t.dim() == ts[0].dim() and t.shape[-1] == ts[0].shape[-1]]
            if not other:
                continue
            m2, s2 = _feature_stats(other)
            if m2.shape != mu.shape:
                continue
            z = ((m2 - mu).abs() / sd)[live].median().item()
            r = (s2 / sd)[live].median().item()
            if is_target and ts[0].dim() >= 2:
                # a forecaster's target is a window of one quantity: validation windows that all start at the
                # same hour have a narrow spread at each step and the usual one over all steps; a split scaled
                # apart is apart both ways, so the milder reading stands
                zp, rp = _pooled_shift(ts, other)
                z, r = min(z, zp), min(r, rp, key=lambda v: abs(math.log(max(v, 1e-9))))
            out.append({"input": path, "target": is_target, "loader": i, "rows": len(loader.dataset), "where": where,
                        "dataset": type(loader.dataset).__name__, "mean_shift_sd": z, "spread_ratio": r})
    if not out:
        return None
    matched = [o for o in out if o["mean_shift_sd"] < SHIFT_MATCH and 1 / 1.5 < o["spread_ratio"] < 1.5]
    apart = [o for o in out if o["mean_shift_sd"] >= SHIFT_APART
             or not 1 / SPREAD_APART < o["spread_ratio"] < SPREAD_APART]
    worst = max(out, key=lambda o: o["mean_shift_sd"] + abs(math.log(max(o["spread_ratio"], 1e-9))))
    swamped = [sw for sw in (augmentation_swamps(reads, path) for path in tensors) if sw]
    clipped = [c for c in (clipped_in_training(ts, reads, path) for path, ts in tensors.items()
                           if path != label_key and ts[0].is_floating_point()) if c]
    return {"loaders": len(reads), "matched": bool(matched), "clipped": clipped[0] if clipped else None,
            "misaligned": misaligned_targets(tensors, label_key, reads),
            "apart": apart[0] if matched and apart else None, "worst": worst,
            "augmentation_swamps": max(swamped, key=lambda sw: sw["noise_over_clean_sd"]) if swamped else None}

STORED_BYTES = 256 << 20  # copy at most this much of a dataset's stored arrays to compare before/after reads


def _stored_floats(ds) -> list:
    """(attribute path, array) for every floating-point numpy array or tensor a dataset keeps (through Subset,
    ConcatDataset and other datasets it wraps, and lists of per-sample arrays): the data __getitem__ reads from."""
    try:
        import numpy as np
    except ImportError:
        np = None
    out, seen = [], set()

    def floating(v):
        if isinstance(v, torch.Tensor):
            return v.is_floating_point()
        return np is not None and isinstance(v, np.ndarray) and v.dtype.kind == "f"

    def walk(obj, prefix, depth):
        if id(obj) in seen or depth > 3 or not hasattr(obj, "__dict__"):
            return
        seen.add(id(obj))
        for k, v in list(vars(obj).items()):
            if floating(v):
                out.append((prefix + k, v))
            elif isinstance(v, torch.utils.data.Dataset):
                walk(v, f"{prefix}{k}.", depth + 1)
            elif isinstance(v, (list, tuple)) and v and len(v) <= 100_000:
                if all(floating(e) for e in v[:8]):
                    out.extend((f"{prefix}{k}[{i}]", e) for i, e in enumerate(v) if floating(e))
                elif isinstance(v[0], torch.utils.data.Dataset):
                    for i, d in enumerate(v[:8]):
                        walk(d, f"{prefix}{k}[{i}].", depth + 1)
    walk(ds, "", 0)
    return out


def _copy(v):
    return v.detach().clone() if isinstance(v, torch.Tensor) else v.copy()


def _changed(a, b) -> int:
    a = a if isinstance(a, torch.Tensor) else torch.from_numpy(a)
    b = b if isinstance(b, torch.Tensor) else torch.from_numpy(b)
    if a.shape != b.shape:
        return a.numel()
    return int((~((a == b) | (torch.isnan(a) & torch.isnan(b)))).sum())


REACH_READS = 16  # items read, spread over the dataset's index range


def _numpy():
    try:
        import numpy as np
    except ImportError:
        return None
    return np


def _int_stream(ds, items: int):
    """(attribute, array) of the longest 1-D integer array or tensor a dataset keeps that is at least twice as long
    as the dataset has items: a token stream that __getitem__ cuts into windows (a table keeps one row per item)."""
    np = _numpy()
    best = None
    for k, v in list(vars(ds).items()) if hasattr(ds, "__dict__") else []:
        if isinstance(v, torch.Tensor) and v.dim() == 1 and not v.is_floating_point() and v.dtype != torch.bool:
            n = v.shape[0]
        elif np is not None and isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iu":
            n = v.shape[0]
        else:
            continue
        if n >= 2 * items and (best is None or n > best[2]):
            best = (k, v, n)
    return best


def stream_reach(target) -> dict | None:
    """How far into the token stream a windowed dataset stores do its items read? The stream is swapped for its
    own positions (0, 1, 2, ...) in a shallow copy of the dataset and items spread over the index range are read:
    a window is a run of consecutive positions, and the last item's end says how much of the stream the dataset
    can ever serve. A window start of `i` where `i * block_size` was meant serves the first len/block_size + block
    tokens over and over (blind dev `recipe_text_char_gpt`: 1.6% of the training text)."""
    for loader, where in getattr(target, "loaders", [])[:4]:
        ds = getattr(loader, "dataset", None)
        try:
            n = len(ds)
        except TypeError:
            continue
        found = _int_stream(ds, n) if n >= 8 else None
        if found is None:
            continue
        name, stream, length = found
        clone = copy.copy(ds)
        pos = torch.arange(length) if isinstance(stream, torch.Tensor) else _numpy().arange(length)
        setattr(clone, name, pos)
        top, windows = -1, 0
        try:
            for i in sorted({int(round(j * (n - 1) / (REACH_READS - 1))) for j in range(REACH_READS)}):
                for _, t in T.flatten(clone[i]):
                    t = torch.as_tensor(t).reshape(-1)
                    if t.numel() > 1 and not t.is_floating_point() and bool((t.diff() == 1).all()):
                        windows += 1
                        top = max(top, int(t.max()))
        except Exception:  # noqa: BLE001 - __getitem__ maps the values (a vocabulary lookup): positions say nothing
            continue
        if windows:
            return {"where": where, "dataset": type(ds).__name__, "stream": name, "length": length, "items": n,
                    "read_up_to": top, "reach": (top + 1) / length}
    return None


def reads_change_data(target, samples=64) -> dict | None:
    """Does reading a dataset change it? For each map-style dataset behind the loaders the factory built: read
    `samples` items once (a lazy cache may fill on a first read), copy its stored float arrays, read them twice
    more and compare after each read. Changed after both: __getitem__ writes into the data it serves (an in-place
    augmentation on a view, img *= gain on self.images[idx]), so each epoch trains on data further from the
    original. Integer arrays (counters, indices) are not compared."""
    found = []
    for i, (loader, where) in enumerate(getattr(target, "loaders", [])[:4]):
        ds = loader.dataset
        if not hasattr(ds, "__getitem__") or not hasattr(ds, "__len__") or len(ds) < 1:
            continue
        stored = _stored_floats(ds)
        if not stored or sum(v.nelement() * v.element_size() if isinstance(v, torch.Tensor) else v.nbytes
                             for _, v in stored) > STORED_BYTES:
            continue
        idx = torch.linspace(0, len(ds) - 1, min(len(ds), samples)).long().tolist()
        try:
            for j in idx:
                ds[j]
            rounds = []
            for _ in range(2):
                before = [_copy(v) for _, v in stored]
                for j in idx:
                    ds[j]
                rounds.append([(name, _changed(b, v), v.numel() if isinstance(v, torch.Tensor) else v.size)
                               for (name, v), b in zip(stored, before)])
        except Exception:  # noqa: BLE001 - a dataset that cannot be read by index here is not judged
            continue
        both = [(name, n, total) for (name, n, total), (_, n2, _) in zip(*rounds) if n and n2]
        if both:
            name, n, total = max(both, key=lambda r: r[1])
            found.append({"loader": i, "where": where, "dataset": type(ds).__name__, "attribute": name,
                          "changed": n, "of": total, "samples": len(idx), "length": len(ds)})
    return found[0] if found else None


SELF_STANDARDISED = 0.9  # share of read samples whose every channel comes out at mean 0, SD 1 over its own steps


def _item_parts(item):
    """(the item's first 2-D float array as a float tensor, its label as a float) or (None, None)."""
    parts = list(item.values()) if isinstance(item, dict) else list(item) if isinstance(item, (tuple, list)) else []
    x = next((torch.as_tensor(v).float() for v in parts if (isinstance(v, torch.Tensor) and v.is_floating_point()
              or getattr(getattr(v, "dtype", None), "kind", "") == "f") and len(getattr(v, "shape", ())) == 2), None)
    y = parts[-1] if parts else None
    if isinstance(y, torch.Tensor) and y.numel() == 1:
        y = y.item()
    elif hasattr(y, "item") and getattr(y, "size", 0) == 1:
        y = y.item()
    return (x, float(y)) if x is not None and isinstance(y, (int, float)) else (None, None)


def _stat_axis(xs: list) -> int | None:
    """The axis over which (nearly) every sample has each channel at mean 0 and SD 1, else None."""
    for axis in (0, 1):
        ok = 0
        for x in xs:
            if x.shape[axis] < 8:
                break
            m, sd = x.mean(axis), x.std(axis, unbiased=False)
            ok += bool((m.abs() < 0.05).all() and ((sd - 1).abs() < 0.05).all())
        if xs and ok >= SELF_STANDARDISED * len(xs):
            return axis
    return None


def _explained(f: torch.Tensor, y: torch.Tensor, classes: bool) -> float:
    """Share of the label's variance (classes: of the feature's variance between the classes, eta squared; else
    the squared correlation) one per-sample feature explains."""
    if float(f.var()) <= 1e-12:
        return 0.0
    if classes:
        total = float(((f - f.mean()) ** 2).sum())
        between = sum(float((y == c).sum()) * float(f[y == c].mean() - f.mean()) ** 2 for c in y.unique())
        return between / total
    return float(torch.corrcoef(torch.stack([f, y]))[0, 1] ** 2)


def self_standardised(target, samples=128) -> dict | None:
    """Does each sample come out standardised by its own statistics, while the data the dataset stores carries the
    label in exactly those statistics? A (steps, channels) window z-scored over its own steps has every channel at
    mean 0, SD 1: its level and amplitude are gone. For each dataset behind the loaders whose stored per-sample
    arrays line up with its items, the stored windows' per-channel mean and log-SD are set against the labels: one
    that explains a good share of them is information the model never sees (an imbalance that doubles vibration
    amplitude, an overload that raises current by 30%, standardised away)."""
    for i, (loader, where) in enumerate(getattr(target, "loaders", [])[:4]):
        ds = loader.dataset
        try:
            n = len(ds)
        except TypeError:
            continue
        if n < 32:
            continue
        idx = torch.linspace(0, n - 1, min(n, samples)).long().tolist()
        try:
            items = [_item_parts(ds[j]) for j in idx]
        except Exception:  # noqa: BLE001 - a dataset that cannot be read by index here is not judged
            continue
        if any(x is None for x, _ in items):
            continue
        xs = [x for x, _ in items]
        axis = _stat_axis(xs)
        if axis is None:
            continue
        stored = {}
        for name, v in _stored_floats(ds):
            stored.setdefault(name.split("[")[0] if name.endswith("]") else name, []).append(v)
        raw = None
        for name, vs in stored.items():
            if len(vs) == n:  # one array per sample
                cand = [torch.as_tensor(vs[j]).float() for j in idx]
            elif len(vs) == 1 and len(vs[0]) == n and tuple(vs[0].shape[1:]) == tuple(xs[0].shape):
                cand = [torch.as_tensor(vs[0][j]).float() for j in idx]
            else:
                continue
            if all(tuple(c.shape) == tuple(x.shape) for c, x in zip(cand, xs)) and _stat_axis(cand) is None:
                raw = (name, cand)
                break
        if raw is None:
            continue
        y = torch.tensor([lab for _, lab in items])
        classes = bool((y == y.round()).all()) and y.unique().numel() <= 50
        feats = []
        for stat in ("mean", "log_sd"):
            vals = torch.stack([c.mean(axis) if stat == "mean" else c.std(axis, unbiased=False).clamp_min(1e-12).log()
                                for c in raw[1]])
            feats += [(stat, ch, _explained(vals[:, ch], y, classes)) for ch in range(vals.shape[1])]
        stat, ch, share = max(feats, key=lambda t: t[2])
        return {"loader": i, "where": where, "dataset": type(ds).__name__, "stored": raw[0], "axis": axis,
                "samples": len(idx), "channels": int(xs[0].shape[1 - axis]), "statistic": stat, "channel": ch,
                "label_explained": share, "classes": classes}
    return None


def sampler_reach(target) -> dict | None:
    """Does a loader's WeightedRandomSampler have one weight per sample? It draws indices below len(weights), so a
    weight per class (or per anything shorter than the dataset) keeps every epoch on the first few samples: the
    model memorises them and the run reads as overfitting."""
    from torch.utils.data import WeightedRandomSampler
    for i, (loader, where) in enumerate(getattr(target, "loaders", [])[:8]):
        samplers = [getattr(loader, "sampler", None), getattr(getattr(loader, "batch_sampler", None), "sampler", None)]
        s = next((x for x in samplers if isinstance(x, WeightedRandomSampler)), None)
        try:
            size = len(loader.dataset)
        except TypeError:
            continue
        if s is None or len(s.weights) >= size:
            continue
        return {"loader": i, "where": where, "weights": len(s.weights), "samples": size,
                "num_samples": int(s.num_samples), "dataset": type(loader.dataset).__name__}
    return None


def _row_summary(x: torch.Tensor) -> torch.Tensor:
    """Per row: its features (N, F), or each channel's mean and spread over time / space (N, C, ...)."""
    x = x.detach().float()
    if x.dim() == 2:
        return x
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    return torch.cat([flat.mean(2), flat.std(2) if flat.shape[2] > 1 else flat.mean(2)], 1)


def _block_spread(rows: torch.Tensor, size: int) -> float:
    """Variance of the block means over the variance a block of `size` iid rows would have, averaged over features."""
    var = rows.var(0).clamp_min(1e-12)
    means = rows.reshape(-1, size, rows.shape[1]).mean(1)
    return float((means.var(0) * size / var).mean())


def unshuffled_loader(target, batches, blocks=16) -> dict | None:
    """Is the training loader unshuffled over rows stored in some order? For the loader whose first batch is the
    first training batch, with a SequentialSampler (shuffle=False): the inputs of `blocks` batches cut where that
    loader cuts them, spread over its dataset; how far their means sit apart, against the same rows shuffled into
    batches. Rows stored sorted (by regime, class, source file) give batches that each hold one kind of row; a
    validation loader is read in order on purpose and is never judged."""
    from torch.utils.data import SequentialSampler
    first = [t for _, t in T.flatten(batches[0]) if t.is_floating_point() and t.dim() >= 2]
    if not first:
        return None
    for loader, where in getattr(target, "loaders", [])[:4]:
        bs = getattr(loader, "batch_size", None)
        if not isinstance(getattr(loader, "sampler", None), SequentialSampler) or not bs or bs < 4:
            continue
        ds = loader.dataset
        n = len(ds)
        if n < 8 * bs:
            continue
        head = [t for _, t in T.flatten(loader.collate_fn([ds[i] for i in range(bs)]))
                if t.is_floating_point() and t.dim() >= 2]
        if not head or head[0].shape != first[0].shape:
            continue
        a, b = head[0].reshape(-1).float(), first[0].reshape(-1).float()
        if not torch.equal(a, b) and torch.corrcoef(torch.stack([a, b]))[0, 1] < 0.9:
            continue  # another loader (a validation one), or the training rows are not this loader's
        starts = (torch.linspace(0, n // bs - 1, min(blocks, n // bs)).long() * bs).tolist()
        xs = [[t for _, t in T.flatten(loader.collate_fn([ds[i] for i in range(s, s + bs)]))
               if t.is_floating_point() and t.dim() >= 2][0] for s in starts]
        rows = _row_summary(torch.cat(xs))
        rows = rows[:, rows.std(0) > 1e-6 * (1 + rows.mean(0).abs())]
        if rows.shape[1] == 0:
            return None
        g = torch.Generator().manual_seed(0)
        base = sum(_block_spread(rows[torch.randperm(len(rows), generator=g)], bs) for _ in range(5)) / 5
        return {"where": where, "dataset": type(ds).__name__, "rows": n, "batch_size": bs, "batches": len(starts),
                "spread": _block_spread(rows, bs), "shuffled": base}
    return None


def run(job):
    a = job.args
    tables: list = []
    if R.wants_pandas(a["workspace"], a["target"]):
        try:
            import pandas  # noqa: F401 - read_csv is patched on the module their code will use
        except ImportError:
            pass
    started = time.monotonic()
    with R.reads(None, tables, a["workspace"]):
        target = load_target(a["target"], a["workspace"])
        batches = _distinct_batches(target, int(a.get("batches", 16)))
    load_s = time.monotonic() - started
    model = target.model
    spy = T.LossSpy()
    embedded = []  # (data_ptr of the tensor an Embedding with a padding_idx reads, that padding_idx)

    def note_embedding(mod, args):
        if args and isinstance(args[0], torch.Tensor) and mod.padding_idx is not None:
            embedded.append((args[0].data_ptr(), int(mod.padding_idx) % mod.num_embeddings))

    try:
        with torch.no_grad(), spy:
            m = copy.deepcopy(model)
            hooks = [e.register_forward_pre_hook(note_embedding) for e in m.modules()
                     if isinstance(e, torch.nn.Embedding)]
            try:
                target.loss(m, batches[0])
            finally:
                for h in hooks:
                    h.remove()
    except Exception as e:  # noqa: BLE001
        raise UserCodeError("forward", e) from e
    label = T.label_slot(batches[0], spy)
    report_same = same_content(batches) if target.data is not None else None
    tensors: dict = {}
    for b in batches:
        for path, t in T.flatten(b, "batch"):
            tensors.setdefault(path, []).append(t)
    label_key = f"batch{label}" if label is not None else None
    conv1d_in = {m.in_channels for m in model.modules() if isinstance(m, torch.nn.Conv1d)}
    report = {"batches_checked": len(batches), "label_slot": label, "loss_kind": spy.name, "inputs": [],
              "identical_batches": report_same, "lengths": lengths_match_padding(batches, label)}
    # the batch tensors an Embedding with a padding_idx reads (by storage: a .to(device) on CPU is the same tensor)
    fed = {path: pad for path, x in T.flatten(batches[0], "batch") for ptr, pad in embedded if x.data_ptr() == ptr}
    report["pad_inside"] = pad_id_inside(batches, fed)
    y = _concat(tensors[label_key]) if label_key in tensors else None
    for path, ts in tensors.items():
        if path == label_key and len(tensors) > 1:
            continue  # an autoencoder's one tensor is its input as well as its target: read as an input
        x = _concat(ts)
        entry = {"name": path, "shape": list(x.shape), "dtype": str(x.dtype).replace("torch.", ""),
                 "reconstructed": path == label_key}
        if x.is_floating_point():
            f = feature_view(x)
            fin = torch.isfinite(f)
            ff = torch.where(fin, f, torch.zeros((), device=f.device))
            mean, std = ff.mean(0), ff.std(0) if f.shape[0] > 1 else torch.zeros(f.shape[1])
            vals = T.to_floats(torch.isnan(x).sum(), torch.isinf(x).sum(), mean, std, x.float().abs().max())
            k = f.shape[1]
            means, stds = vals[2:2 + k], vals[2 + k:2 + 2 * k]
            entry.update(nan=int(vals[0]), inf=int(vals[1]), features=k, absmax=vals[-1],
                         feature_mean_range=[min(means), max(means)], feature_std_range=[min(stds), max(stds)],
                         constant_features=[i for i, s in enumerate(stds) if s == 0.0][:20],
                         feature_means=means[:64], feature_stds=stds[:64])
            inter = channel_interleave(x, conv1d_in)
            if inter is not None:
                entry["channel_interleave"] = inter
            across = standardised_across_channels(x, conv1d_in)
            if across is not None:
                entry["standardised_across_channels"] = across
            padded_scale = padding_in_scaler(x, conv1d_in)
            if padded_scale is not None:
                entry["padding_in_scaler"] = padded_scale
            if y is not None and path != label_key:
                score = leakage(x, y)
                if score is not None:
                    sv = score.tolist()
                    best = max(range(len(sv)), key=lambda i: sv[i])
                    entry["leakage"] = {"feature": best, "label_explained": sv[best],
                                        "exact_copy": bool(y.shape[0] == x.shape[0]
                                                           and torch.equal(x[:, best].to(y.dtype), y.reshape(-1)))}
        else:
            entry.update(nan=0, inf=0, min=int(x.min()) if x.numel() else None,
                         max=int(x.max()) if x.numel() else None)
        report["inputs"].append(entry)
    if y is not None:
        lab = {"name": label_key, "shape": list(y.shape), "dtype": str(y.dtype).replace("torch.", "")}
        if not y.is_floating_point():
            counts = torch.bincount(y.reshape(-1).long().clamp(min=0),
                                    minlength=int(target.num_classes or 0)).tolist()
            present = [c for c in counts if c > 0]
            lab.update(counts=counts[:100], classes=len(counts), classes_present=len(present),
                       majority_frac=max(counts) / max(1, sum(counts)),
                       imbalance_ratio=max(present) / min(present) if present else None)
        else:
            v = T.to_floats(y.float().mean(), y.float().std(), torch.isnan(y).sum(), torch.isinf(y).sum())
            lab.update(mean=v[0], std=v[1], nan=int(v[2]), inf=int(v[3]))
        report["labels"] = lab
    dn = eval_mode_modules(model)
    report["model_training"] = model.training
    report["eval_mode_modules"] = dn[:20]
    if label is not None and not any(p != label for p, _ in T.flatten(batches[0])):
        report["alignment"] = {"skipped": "the loss target is the input itself (an autoencoder): no labels to permute"}
    elif label is not None:
        try:
            report["alignment"] = alignment(target, model, batches, label, int(a.get("align_steps", 40)),
                                            float(a.get("lr_scale", 1.0)))
        except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
            report["alignment"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    else:
        report["alignment"] = {"skipped": "could not tell the labels from the inputs in the batch"}
    try:
        report["padding"] = padding_read(target, model, batches, label)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["padding"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    if label is not None and tables and load_s > ROWS_LOAD_S:
        report["rows"] = {"skipped": f"the factory took {load_s:.0f} s to load: not run a second time on coded tables"}
    elif label is not None and tables:
        try:
            report["rows"] = rows_keep_labels(a, tables, target, batches, label)
        except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
            report["rows"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    report["batch_mixing"] = batch_mixing(tensors[label_key]) if label_key in tensors else None
    if spy.weight is not None and y is not None and not y.is_floating_point():
        report["class_weights"] = class_weight_order(spy.weight, y)
    try:
        report["unshuffled"] = unshuffled_loader(target, batches)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["unshuffled"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    try:
        report["reads_change_data"] = reads_change_data(target)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["reads_change_data"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    try:
        report["stream_reach"] = stream_reach(target)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["stream_reach"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    try:
        report["self_standardised"] = self_standardised(target)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["self_standardised"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    try:
        report["sampler_reach"] = sampler_reach(target)
    except Exception as e:  # noqa: BLE001 - advisory (a custom dataset's __len__ may raise anything); say why
        report["sampler_reach"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    report["coerced"] = R.COERCED[0] if R.COERCED else None  # the factory's to_numeric calls, seen while it loaded
    report["text_compared"] = R.TEXT_COMPARED[0] if R.TEXT_COMPARED else None  # its `column == 1`s on text
    try:
        report["read_ahead"] = target_read_ahead(target, model, batches, label)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["read_ahead"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    try:
        report["split_shift"] = split_shift(target, tensors, label_key)
    except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
        report["split_shift"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    if label is not None:
        try:
            report["label_prior"] = label_prior(target, model, batches)
        except Exception as e:  # noqa: BLE001 - advisory; say why it did not run
            report["label_prior"] = {"skipped": f"{type(e).__name__}: {e}"[:300]}
    return report


if __name__ == "__main__":
    main(run)
