"""sequence_check: a model mapping (B, T) tokens to (B, T, V) logits: causality, target alignment, padding.

Everything is seen at the model's own boundary, through hooks on the root module, so it works whatever the
batch looks like ((x, y), dicts, one (B, T+1) tensor sliced in the loss) and whatever the model returns
(logits, (logits, loss), an object with .logits):
- causality: the token tensor is perturbed after position t inside a forward pre-hook; the logits at <= t
  must not move. A leak is localised to the deepest module whose output at <= t moves while its inputs at
  <= t do not.
- alignment: the gradient of the target's loss with respect to the logits. For cross-entropy-like losses
  d loss / d logits[b, t] is negative only at the class the loss compares position t with, and exactly zero
  where the loss ignores the position, so it says which token each position is scored against (x[t+1]:
  next-token; x[t]: the model is asked to copy its input) and whether padded positions count.
"""

import ast
import textwrap

import torch
import torch.nn.functional as F

import mltriage_torch as T
from mltriage_io import UserCodeError, main
from mltriage_target import TargetSpecError, load_target

INPUT_KEYS = ("input_ids", "idx", "tokens", "token_ids", "input", "inputs", "x", "src")
NOT_INPUT = ("labels", "label", "targets", "target", "y", "attention_mask", "token_type_ids", "position_ids")
# methods that return a new tensor; a bare statement calling one throws its result away
PURE_METHODS = ("masked_fill", "tril", "triu", "where", "softmax", "add", "mul", "clamp", "transpose", "contiguous")


def _is_tokens(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() == 2 and not t.is_floating_point() and not t.is_complex() \
        and t.dtype != torch.bool


def _token_slot(args, kwargs):
    """Where the (B, T) token tensor sits among the model's arguments: ('kw', key) / ('arg', i) / ('arg', i, key)."""
    for k in INPUT_KEYS:
        if _is_tokens(kwargs.get(k)):
            return ("kw", k)
    for i, a in enumerate(args):
        if _is_tokens(a):
            return ("arg", i)
        if isinstance(a, dict):
            for k in INPUT_KEYS + tuple(k for k in a if k not in NOT_INPUT):
                if _is_tokens(a.get(k)):
                    return ("arg", i, k)
    for k, v in kwargs.items():
        if k not in NOT_INPUT and _is_tokens(v):
            return ("kw", k)
    return None


def _get(args, kwargs, slot):
    if slot[0] == "kw":
        return kwargs[slot[1]]
    return args[slot[1]] if len(slot) == 2 else args[slot[1]][slot[2]]


def _put(args, kwargs, slot, value):
    args, kwargs = list(args), dict(kwargs)
    if slot[0] == "kw":
        kwargs[slot[1]] = value
    elif len(slot) == 2:
        args[slot[1]] = value
    else:
        args[slot[1]] = {**args[slot[1]], slot[2]: value}
    return tuple(args), kwargs


def _logits_for(out, tokens):
    """The (B, T, V) logits among a model's outputs for its (B, T) tokens."""
    return next((t for _, t in T.flatten(out) if t.is_floating_point() and t.dim() == 3
                 and tuple(t.shape[:2]) == tuple(tokens.shape) and t.shape[2] > 1), None)


class Capture:
    """One call of the target's loss, seen at the root module: its input (by default the (B, T) tokens; `slot_of`
    finds another), the output that answers it (by default the (B, T, V) logits; `output_of`), the loss."""

    def __init__(self, target, batch, slot_of=_token_slot, output_of=_logits_for):
        self.target, self.batch, self.model = target, batch, target.model
        self.slot_of, self.output_of = slot_of, output_of

    def __call__(self, perturb=None, grad=False):
        seen = {}

        def pre(module, args, kwargs):
            if "tokens" in seen:  # only the first call of the model per loss
                return None
            slot = self.slot_of(args, kwargs)
            if slot is None:
                seen["tokens"] = None
                return None
            tokens = _get(args, kwargs, slot)
            seen["tokens"] = tokens
            if perturb is not None:
                return _put(args, kwargs, slot, perturb(tokens))
            return None

        def post(module, args, kwargs, out):
            if "out" in seen:
                return None
            seen["out"] = out
            tok = seen.get("tokens")
            if tok is None:
                return None
            t = self.output_of(out, tok)
            if t is not None:
                if grad and t.requires_grad:
                    t.retain_grad()
                seen["logits"] = t
            return None

        hooks = [self.model.register_forward_pre_hook(pre, with_kwargs=True),
                 self.model.register_forward_hook(post, with_kwargs=True)]
        loss = None
        try:
            with torch.enable_grad() if grad else torch.no_grad():
                try:
                    loss = self.target.loss(self.model, self.batch)
                except TargetSpecError:
                    if "out" not in seen:  # no loss at all is fine once the model has answered
                        raise
                if grad and isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad:
                    loss.backward()
        except TargetSpecError:
            raise
        except Exception as e:  # noqa: BLE001
            raise UserCodeError("forward", e) from e
        finally:
            for h in hooks:
                h.remove()
        return seen.get("tokens"), seen.get("logits"), seen.get("out"), loss


def _maxdiff(a, b) -> float:
    if a.numel() == 0:
        return 0.0
    return float((a.float() - b.float()).abs().max())


def _time_axis(t, B, T_):
    if not isinstance(t, torch.Tensor) or t.dim() < 2 or t.shape[0] != B:
        return None
    if t.shape[1] == T_:
        return 1
    if t.dim() >= 3 and t.shape[2] == T_:
        return 2  # (B, heads, T, d)
    return None


def _past(t, B, T_, cut):
    ax = _time_axis(t, B, T_)
    if ax is None:
        return None
    # row 0 only: enough to see a leak, and small enough to keep for every module call
    return t.detach()[:1].narrow(ax, 0, cut + 1).float().clone()


class Tape:
    """Per module call, in call order: the inputs and outputs at positions <= cut (batch row 0)."""

    def __init__(self, model, B, T_, cut):
        self.calls, self.stack, self.hooks = [], [], []
        self.B, self.T, self.cut = B, T_, cut
        for name, m in model.named_modules():
            self.hooks.append(m.register_forward_pre_hook(self._pre(name)))
            self.hooks.append(m.register_forward_hook(self._post))

    def _pre(self, name):
        def hook(m, args):
            ins = [p for p in (_past(t, self.B, self.T, self.cut) for _, t in T.flatten(args)) if p is not None]
            self.stack.append(len(self.calls))
            self.calls.append({"name": name, "module": m, "ins": ins, "outs": []})
        return hook

    def _post(self, m, args, out):
        if self.stack:
            c = self.calls[self.stack.pop()]
            c["outs"] = [p for p in (_past(t, self.B, self.T, self.cut) for _, t in T.flatten(out)) if p is not None]

    def remove(self):
        for h in self.hooks:
            h.remove()


def _changed(xs, ys, rel) -> bool:
    return any(a.shape == b.shape and a.numel() and _maxdiff(a, b) > rel * (1 + float(a.abs().max()))
               for a, b in zip(xs, ys))


def _is_torch(cls) -> bool:
    return (getattr(cls, "__module__", "") or "").startswith("torch.")


def _hints(fn) -> list:
    """Lines of a forward that throw a computed mask away or call attention without a causal mask."""
    path, first, lines = T.source_of(fn)
    if lines is None:
        return []
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return []
    out = []
    for node in ast.walk(tree):
        line = first + getattr(node, "lineno", 1) - 1
        text = lines[getattr(node, "lineno", 1) - 1].strip() if getattr(node, "lineno", 0) <= len(lines) else ""
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Attribute) \
                and node.value.func.attr in PURE_METHODS:
            out.append(f"{path}:{line}: `{text}` computes a new tensor and discards it "
                       f"({node.value.func.attr} is not in-place: assign the result or use {node.value.func.attr}_)")
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "scaled_dot_product_attention":
            kw = {k.arg: k.value for k in node.keywords}
            causal = kw.get("is_causal")
            off = causal is None or (isinstance(causal, ast.Constant) and not causal.value)
            if off and "attn_mask" not in kw and len(node.args) < 4:
                out.append(f"{path}:{line}: `{text}` runs attention with neither is_causal=True nor attn_mask")
    return out[:4]


def _future_open(mask, api):
    """Share of the future (above the diagonal) a (.., T, T) attention mask leaves open, as `api` reads it:
    scaled_dot_product_attention takes a bool True as 'may attend', nn.MultiheadAttention as 'blocked'; a float
    mask is added to the scores in both, so only a large negative value blocks."""
    if not isinstance(mask, torch.Tensor) or mask.dim() < 2 or mask.shape[-1] != mask.shape[-2] or mask.shape[-1] < 2:
        return None
    m = mask.detach().reshape(-1, mask.shape[-2], mask.shape[-1])[0]
    future = torch.ones_like(m, dtype=torch.bool).triu(1)
    if m.dtype == torch.bool:
        open_ = m if api == "sdpa" else ~m
    elif m.is_floating_point():
        open_ = m > -1e4
    else:
        return None
    return float(open_[future].float().mean()), m, m[future]


def _caller() -> str:
    import sys
    f = sys._getframe(2)
    return f"{T.relative(f.f_code.co_filename)}:{f.f_lineno}"


def mask_hints(cap, model) -> list:
    """What the masks handed to attention leave open: a mask built for one API and read by another (a bool
    'allowed' mask where True means 'blocked', a 0/1 float mask that is added to the scores) blocks nothing."""
    seen, hooks = [], []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kw):
        mask = kw.get("attn_mask", args[3] if len(args) > 3 else None)
        causal = kw.get("is_causal", args[5] if len(args) > 5 else False)
        seen.append(("scaled_dot_product_attention", "sdpa", "causal" if causal and mask is None else mask, _caller()))
        return sdpa(*args, **kw)

    def pre(name, pos, keys):
        def hook(m, args, kwargs):
            mask = next((kwargs[k] for k in keys if kwargs.get(k) is not None), args[pos] if len(args) > pos else None)
            seen.append((f"{name} ({type(m).__name__})", "mha", mask, None))
        return hook

    for name, m in model.named_modules():
        if isinstance(m, torch.nn.MultiheadAttention):
            hooks.append(m.register_forward_pre_hook(pre(name, 5, ("attn_mask",)), with_kwargs=True))
        elif isinstance(m, torch.nn.TransformerEncoderLayer):
            hooks.append(m.register_forward_pre_hook(pre(name, 1, ("src_mask",)), with_kwargs=True))
    F.scaled_dot_product_attention = spy
    try:
        cap()
    finally:
        F.scaled_dot_product_attention = sdpa
        for h in hooks:
            h.remove()
    out: list = []
    for who, api, mask, where in seen:
        if api == "sdpa" and mask is None:
            out.append(f"{where}: scaled_dot_product_attention ran with neither attn_mask nor is_causal=True")
            break
        found = _future_open(mask, api)
        if found is None or found[0] == 0.0:
            continue
        share, m, above = found
        at = f"{where}: " if where else ""
        if m.dtype == torch.bool and api == "sdpa":
            out.append(f"{at}the bool attn_mask given to {who} is True at {share:.0%} of the future positions: for "
                       "scaled_dot_product_attention True means 'may attend' (nn.MultiheadAttention reads True as "
                       "'blocked'); pass is_causal=True, or the lower-triangular mask (~mask)")
        elif m.dtype == torch.bool:
            out.append(f"{at}the bool mask given to {who} is False at {share:.0%} of the future positions: there True "
                       "means 'blocked'; use torch.triu(torch.ones(T, T, dtype=torch.bool), 1)")
        else:
            out.append(f"{at}the float mask given to {who} holds {float(above.min()):g}..{float(above.max()):g} above "
                       "the diagonal: a float mask is added to the scores, so only -inf blocks; use "
                       "nn.Transformer.generate_square_subsequent_mask(T) or a bool mask")
        break  # the first layer's mask says it; the others are the same mask
    return out


def _seq_first(rnn_inputs, tokens) -> bool:
    """Tokens laid out (T, B), as torch's word_language_model does: an RNN with batch_first=False takes the
    embedded tokens in that same layout (a model that transposes (B, T) tokens itself feeds it the other way)."""
    if tokens.dim() != 2:
        return False
    fed = [(m, x) for m, x in rnn_inputs if isinstance(x, torch.Tensor) and x.dim() == 3]
    if not fed or any(m.batch_first for m, _ in fed):
        return False
    if tokens.shape[0] == tokens.shape[1]:
        return True  # square: the module's own flag is all there is to go on
    return tuple(fed[0][1].shape[:2]) == tuple(tokens.shape)


def localise(cap, model, B, T_, cut, perturb, rel):
    """The deepest module whose output at <= cut changes while its inputs at <= cut do not."""
    tapes = []
    for p in (None, perturb):
        tape = Tape(model, B, T_, cut)
        try:
            cap(perturb=p)
        finally:
            tape.remove()
        tapes.append(tape.calls)
    base, pert = tapes
    if len(base) != len(pert):
        return None
    cands = []
    for a, b in zip(base, pert):
        if a["name"] != b["name"] or not a["ins"]:
            continue
        if _changed(a["outs"], b["outs"], rel) and not _changed(a["ins"], b["ins"], rel):
            cands.append(a)
    # the root ("") and any ancestor contain the culprit; keep the deepest
    deepest = [c for c in cands if not any(o is not c and (c["name"] == "" and o["name"] or
                                                           o["name"].startswith(c["name"] + ".")) for o in cands)]
    if not deepest:
        return None
    c = deepest[0]
    m = c["module"]
    names = {id(mod): n for n, mod in model.named_modules()}
    owner, owner_name = m, c["name"]
    mods = dict(model.named_modules())
    while _is_torch(type(owner)) and owner is not model:
        # a torch attention layer sees the future unless the user's code passes a mask: point at that code
        owner_name = owner_name.rsplit(".", 1)[0] if "." in owner_name else ""
        owner = mods.get(owner_name, model)
    path, first, _ = T.source_of(type(owner).forward)
    hints = mask_hints(cap, model) + _hints(type(owner).forward)
    if _is_torch(type(m)) and not hints:
        hints.insert(0, f"{type(m).__name__} attends to every position unless given a causal mask "
                        "(attn_mask / is_causal=True, e.g. nn.Transformer.generate_square_subsequent_mask(T))")
    return {"module": c["name"] or "(root)", "module_type": type(m).__name__,
            "location": f"{path}:{first} ({type(owner).__name__}.forward)" if path else None,
            "owner": names.get(id(owner)) or "(root)", "hints": hints,
            "modules_changed": [x["name"] or "(root)" for x, y in zip(base, pert)
                                if _changed(x["outs"], y["outs"], rel)][:12]}


def _edge_runs(x):
    """Per row: (value, length) of the run at the end and at the start."""
    def run_len(v, m):
        return (m == v[:, None]).int().cumprod(1).sum(1)
    return (x[:, -1], run_len(x[:, -1], x.flip(1))), (x[:, 0], run_len(x[:, 0], x))


def pad_from_runs(x):
    """A token id filling the tail (or the head) of many rows and appearing almost only there."""
    B = x.shape[0]
    best = None
    for vals, lens in _edge_runs(x):
        ok = lens >= 2
        if int(ok.sum()) < 2:
            continue
        ids, counts = torch.unique(vals[ok], return_counts=True)
        i = int(counts.argmax())
        pid, rows = int(ids[i]), int(counts[i])
        if rows < max(2, 0.25 * B):
            continue
        in_runs = int(lens[ok & (vals == pid)].sum())
        total = int((x == pid).sum())
        if total and in_runs / total >= 0.8 and (best is None or rows > best[1]):
            best = (pid, rows)
    return best


def alignment(tokens, logits, grad):
    """Which token the loss scores each position against, from d loss / d logits."""
    g = grad.detach().float()
    mag = g.abs().amax(-1)
    counted = mag > 1e-7 * float(mag.max()) if float(mag.max()) > 0 else torch.zeros_like(mag, dtype=torch.bool)
    two = g.topk(2, dim=-1, largest=False).values if g.shape[-1] > 1 else None
    det = counted & (two[..., 0] < 0) & (two[..., 0] < 2 * two[..., 1].clamp(max=0))
    tgt = g.argmin(-1)
    x = tokens.to(tgt.device)
    m = det[:, :-1] & (x[:, :-1] != x[:, 1:])  # a repeated token cannot tell "same" from "next"
    n = int(m.sum())
    same = float((tgt[:, :-1] == x[:, :-1])[m].float().mean()) if n else None
    nxt = float((tgt[:, :-1] == x[:, 1:])[m].float().mean()) if n else None
    if n >= 4 and nxt >= 0.9:
        objective = "next_token"
    elif n >= 4 and same >= 0.9:
        objective = "same_position"
    elif n >= 4:
        objective = "other"
    else:
        objective = "unknown"
    return {"counted": counted, "det": det, "tgt": tgt, "positions": n, "same_frac": same, "next_frac": nxt,
            "objective": objective, "counted_frac": float(counted.float().mean()),
            "determined_frac": float(det.float().mean()), **stream_match(x, tgt, det)}


def stream_match(x, tgt, det, shifts=range(-3, 4)):
    """Whether the scored targets are tokens of the input's own stream (same vocabulary, same frequencies: a language
    model's, not a tagger's) and how well they line up with the inputs at the best small offset. A language model
    whose targets were cut from the text at other offsets than its inputs scores every position against an
    unrelated token of the same text."""
    t = tgt[det]
    if t.numel() < 32:
        return {}
    V = int(max(int(x.max()), int(t.max()))) + 1
    px = torch.bincount(x.reshape(-1).long(), minlength=V).double()
    pt = torch.bincount(t.long(), minlength=V).double()
    px, pt = px / px.sum(), pt / pt.sum()
    best = 0.0
    for k in shifts:
        a, b = (tgt[:, :tgt.shape[1] - k], x[:, k:]) if k >= 0 else (tgt[:, -k:], x[:, :k])
        m = det[:, :tgt.shape[1] - k] if k >= 0 else det[:, -k:]
        if int(m.sum()):
            best = max(best, float((a == b)[m].float().mean()))
    return {"target_input_tv": float(0.5 * (px - pt).abs().sum()), "best_shift_frac": best,
            "chance_match": float((px * pt).sum())}


def batch_labels(batch, tokens, bt=lambda t: t):
    """The batch's own labels, when they are a (B, T) integer tensor beside the inputs (`bt` turns the batch's
    layout into (B, T))."""
    path = T.label_slot(batch)
    y = T.get(batch, path) if path else None
    y = bt(y) if _is_tokens(y) else y
    if not _is_tokens(y) or tuple(y.shape) != tuple(tokens.shape) or y is tokens:
        return None
    valid = y >= 0
    same = (y == tokens) & valid
    shift = (y[:, :-1] == tokens[:, 1:]) & valid[:, :-1]
    return {"slot": path, "same_frac": float(same.sum() / valid.sum().clamp(min=1)),
            "shift_frac": float(shift.sum() / valid[:, :-1].sum().clamp(min=1))}


def leaks(past, future, tol) -> bool:
    """The past moved beyond rounding, and by more than a thousandth of what the changed future itself moved."""
    return past > tol and past > 1e-3 * future


def _shifted_channel(x, y):
    """The channel c of a (B, T, F) float series x with y[:, t] == x[:, t+1, c] at nearly every t (next-step
    forecasting, teacher-forced), or None."""
    y = y.reshape(y.shape[0], y.shape[1], -1)[..., 0] if y.dim() == 3 else y
    if y.dim() != 2 or y.shape[:2] != x.shape[:2] or x.shape[1] < 4:
        return None
    for c in range(x.shape[2]):
        same = torch.isclose(y[:, :-1].float(), x[:, 1:, c].float(), rtol=1e-4, atol=1e-6)
        if float(same.float().mean()) >= 0.9:
            return c
    return None


def forecast_causality(target, batch, model):
    """A model fed a (B, T, F) float series and scored against the series' own next step: its output at <= t
    must not move when only inputs after t change (a bidirectional RNN, a non-causal conv or attention over the
    window reads the value it is asked to predict)."""
    ts = [t for _, t in T.flatten(batch)]
    xs = [t for t in ts if t.is_floating_point() and t.dim() == 3]
    for x in xs:
        c = next((c for y in ts if y is not x and y.is_floating_point() for c in [_shifted_channel(x, y)]
                  if c is not None), None)
        if c is not None:
            break
    else:
        return None
    B, T_ = x.shape[:2]
    gen = torch.Generator().manual_seed(0)
    # the series is found by identity among the model's arguments, its answer is the (B, T, ...) output
    cap = Capture(target, batch,
                  slot_of=lambda args, kwargs: next((("arg", i) for i, a in enumerate(args) if a is x), None)
                  or next((("kw", k) for k, v in kwargs.items() if v is x), None),
                  output_of=lambda out, series: next((t for _, t in T.flatten(out) if t.is_floating_point()
                                                      and t.dim() >= 2 and tuple(t.shape[:2]) == (B, T_)), None))

    def forward(cut=None):
        def bump(a):
            a = a.clone()
            a[:, cut + 1:] += torch.randn(a[:, cut + 1:].shape, generator=gen).to(a) * (1 + float(a.std()))
            return a
        return cap(perturb=None if cut is None else bump)[1]

    base = forward()
    if base is None:
        return None
    base = base.detach().clone()
    scale = float(base.abs().max())
    tol = 1e-5 * (1 + scale) if base.dtype == torch.float32 else 1e-2 * (1 + scale)
    checks = []
    for cut in sorted({T_ // 4, T_ // 2, (3 * T_) // 4} - {T_ - 1}):
        out = forward(cut)
        if out is None:
            return None
        past, future = _maxdiff(out[:, :cut + 1], base[:, :cut + 1]), _maxdiff(out[:, cut + 1:], base[:, cut + 1:])
        checks.append({"t": cut, "past_change": past, "future_change": future,
                       "leak": leaks(past, future, tol)})
    if not any(c["future_change"] > 0 for c in checks):
        return None  # the series the model got is not the batch's tensor (copied on the way): nothing was tested
    recurrent = [f"{n} ({type(m).__name__}, bidirectional)" for n, m in model.named_modules()
                 if isinstance(m, torch.nn.RNNBase) and m.bidirectional]
    return {"channel": c, "series_shape": list(x.shape), "causality": checks, "bidirectional": recurrent[:3]}


def run(job):
    a = job.args
    target = load_target(a["target"], a["workspace"])
    model = target.model
    batch = target.first_batch()
    model.eval()  # dropout off: two forwards on the same tokens must agree
    cap = Capture(target, batch)
    job.progress(0, 4, "forward", force=True)
    emb_inputs, rnn_inputs = [], []
    hooks = [m.register_forward_pre_hook(lambda m, args: emb_inputs.append((m, args[0] if args else None)))
             for m in model.modules() if isinstance(m, torch.nn.Embedding)]
    hooks += [m.register_forward_pre_hook(lambda m, args: rnn_inputs.append((m, args[0] if args else None)))
              for m in model.modules() if isinstance(m, torch.nn.RNNBase)]
    try:
        tokens, logits, out, loss = cap()
    finally:
        for h in hooks:
            h.remove()
    if tokens is None:
        shapes = [list(t.shape) for _, t in T.flatten(batch)][:4]
        report = {"sequence_model": False, "note": f"the model gets no (B, T) integer token tensor (batch tensors: {shapes})"}
        fc = forecast_causality(target, batch, model)
        if fc is not None:
            report.update(note=f"a next-step forecaster: targets are input channel {fc['channel']} one step ahead",
                          forecast_channel=fc["channel"], causality=fc["causality"], tokens_shape=fc["series_shape"][:2],
                          causal=not any(c["leak"] for c in fc["causality"]), leak_hints=fc["bidirectional"])
        return report
    if logits is None:
        shapes = [list(t.shape) for _, t in T.flatten(out)][:4]
        return {"sequence_model": False, "tokens_shape": list(tokens.shape),
                "note": f"the model's output has no (B, T, V) tensor matching its {list(tokens.shape)} tokens "
                        f"(outputs: {shapes})"}
    tokens, logits = tokens.detach().clone(), logits.detach().clone()
    # the embedding fed the tokens: its size bounds the perturbation, its padding_idx names the pad id
    emb = next((m for m, x in emb_inputs if isinstance(x, torch.Tensor) and tuple(x.shape) == tuple(tokens.shape)
                and torch.equal(x, tokens)), None)
    seq_first = _seq_first(rnn_inputs, tokens)
    bt = (lambda t: t.transpose(0, 1)) if seq_first else (lambda t: t)  # every reading below is (B, T, ...)
    tokens, logits = bt(tokens), bt(logits)
    B, T_, V = logits.shape
    report = {"sequence_model": True, "tokens_shape": [B, T_], "logits_shape": [B, T_, V],
              "loss": float(loss) if isinstance(loss, torch.Tensor) and loss.numel() == 1 else None}
    if seq_first:
        report["layout"] = "time first: (T, B) tokens into an RNN with batch_first=False, read here as (B, T)"
    top = int(tokens.max())
    sizes = sorted(m.num_embeddings for m in model.modules()
                   if isinstance(m, torch.nn.Embedding) and m.num_embeddings > top)
    vocab = emb.num_embeddings if emb is not None else sizes[0] if sizes else V if V > top else top + 1
    report["vocab"] = vocab

    _, again, _, _ = cap()
    noise = _maxdiff(logits, bt(again))
    scale = float(logits.abs().max())
    # float rounding bounds what "unchanged" can mean; a leak moves logits by orders of magnitude more
    eps = 1e-2 if logits.dtype in (torch.float16, torch.bfloat16) else 1e-5
    tol = max(10 * noise, eps * (1 + scale))
    report["nondeterminism"] = noise

    gen = torch.Generator().manual_seed(0)
    cuts = sorted({c for c in (T_ // 4, T_ // 2, (3 * T_) // 4) if 0 <= c <= T_ - 2})

    def perturber(cut):
        def perturb(x):
            x = bt(x)
            y = x.clone()
            shift = torch.randint(1, max(2, vocab), (x.shape[0], x.shape[1] - cut - 1), generator=gen).to(x.device)
            y[:, cut + 1:] = (x[:, cut + 1:] + shift.to(x.dtype)) % vocab  # always a different token
            return bt(y).contiguous()
        return perturb

    checks, leak_cut = [], None
    for i, cut in enumerate(cuts):
        job.progress(1 + i / max(1, len(cuts)), 4, f"causality at t={cut}")
        _, lp, _, _ = cap(perturb=perturber(cut))
        lp = bt(lp)
        past = _maxdiff(lp[:, :cut + 1], logits[:, :cut + 1])
        future = _maxdiff(lp[:, cut + 1:], logits[:, cut + 1:])
        leak = leaks(past, future, tol)
        checks.append({"t": cut, "past_change": past, "future_change": future, "leak": leak})
        if leak and leak_cut is None:
            leak_cut = cut
    report["causality"] = checks
    report["tolerance"] = tol
    report["causal"] = None if not checks else not any(c["leak"] for c in checks)
    if leak_cut is not None:
        job.progress(2.5, 4, "localising the leak")
        # upstream of the leak the past is computed from the same numbers in the same order: bit for bit the
        # same, so any change beyond the run-to-run noise marks the leak (the logits' tolerance would let a small
        # change pass the attention that makes it and blame the LayerNorm after the residual add, which scales it)
        report["leak"] = localise(cap, model, B, T_, leak_cut, perturber(leak_cut),
                                  max(eps * 1e-3, 10 * noise / (1 + scale)))

    # which target each position is scored against, and whether pad positions count
    job.progress(3, 4, "loss alignment")
    pad, pad_from = None, None
    if emb is not None and emb.padding_idx is not None:
        pad, pad_from = int(emb.padding_idx), "embedding padding_idx"
    else:
        found = pad_from_runs(tokens)
        if found:
            pad, pad_from = found[0], f"token {found[0]} fills the edge of {found[1]} of {B} sequences"
    report["pad_id"], report["pad_from"] = pad, pad_from
    report["pad_frac"] = float((tokens == pad).float().mean()) if pad is not None else None
    report["batch_labels"] = batch_labels(batch, tokens, bt)
    report["loss_location"] = _loss_location(target, model)
    if not any(p.requires_grad for p in model.parameters()):
        report["alignment"] = {"objective": "unknown", "note": "no parameter requires grad: no gradient to read"}
        return report
    _, lg, _, gl = cap(grad=True)
    if lg is None or lg.grad is None:
        why = "the target's loss does not reach the logits" if gl is not None else "the target has no loss"
        report["alignment"] = {"objective": "unknown", "note": why}
        return report
    al = alignment(tokens, bt(lg), bt(lg.grad))
    report["alignment"] = {k: al.get(k) for k in ("objective", "positions", "same_frac", "next_frac", "counted_frac",
                                                  "determined_frac", "target_input_tv", "best_shift_frac",
                                                  "chance_match")}
    if pad is not None:
        counted, det, tgt = al["counted"], al["det"], al["tgt"]
        x = tokens.to(tgt.device)
        tv = al.get("target_input_tv")
        if al["objective"] in ("next_token", "same_position") or (tv is not None and tv <= 0.2):
            # targets are tokens of the input text: the class a position is scored against when known, else its
            # input token (right padding)
            is_pad = torch.where(det, tgt == pad, x == pad)
        else:
            # a tagger's targets are tags, whose ids mean nothing as tokens (tag 0 "O" is no pad token 0): a
            # position is padding when its input is
            is_pad = x == pad
        n_counted = int(counted.sum())
        report["pad_counted_frac"] = float((is_pad & counted).sum()) / n_counted if n_counted else None
        sel = det & counted
        if int(sel.sum()):
            lf = logits.float().to(tgt.device)
            report["ce_with_pad"] = float(F.cross_entropy(lf[sel], tgt[sel]))
            keep = sel & ~is_pad
            report["ce_without_pad"] = float(F.cross_entropy(lf[keep], tgt[keep])) if int(keep.sum()) else None
    job.progress(4, 4, "done", force=True)
    return report


def _loss_location(target, model):
    fn = target.loss_fn if target.loss_fn is not None else type(model).forward
    path, first, _ = T.source_of(fn)
    return f"{path}:{first} ({getattr(fn, '__qualname__', '?')})" if path else None


if __name__ == "__main__":
    main(run)
