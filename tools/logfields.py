"""What the numbers on one training-log line are: named fields as frameworks print them, and what kind of
series each name is.

Frameworks name a value with words around it, not only with `key=value`: nanoGPT's `train loss 4.2, val loss
4.3`, Megatron's `| lm loss: 4.1E+00 | learning rate: 3.0E-04 |`, torchtitan's `validate step: 10  loss: ...`,
timm's `Test: [ 10/20]  Loss: ...`. The name given here keeps what the words say (`val_loss`, `lm_loss`,
`learning_rate`), so that train and validation series stay apart. Only the per-line (slow) parser calls this;
a line shape seen twice becomes a template that repeats the names found here (tools/logs.py).
"""

import re
from typing import Literal, NamedTuple

NUM = (r"[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?:[eE][-+]?\d+)?"  # 902,558 (Python's `:,` format)
       r"|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:[Nn]a[Nn]|NAN|[Ii]nf(?:inity)?|INF)")
# a unit glued to the number (`41.2ms`, `3.95%`, `10.50GiB`): the value is the number, the unit stays literal
UNIT = r"(?:%|ms|us|µs|ns|sec|s|min|GiB|MiB|KiB|TiB|GB|MB|KB|TB|[KMGTB])"
# ... and the number ends there: not `12:00`, not `1,2`, not a word
_END = r"(?![\w.\-]|:\S|,\d)"
_VALUE = r"(?P<vq>['\"]?)(?P<v>" + NUM + r")(?P<u>" + UNIT + r")?(?P=vq)" + _END
KV = re.compile(r"(?<![\w.\-/@])(?P<q>['\"]?)(?P<k>[A-Za-z_][\w./\-@]*?)(?P=q)\s*(?:[:=]\s*|\s*\.{3,}\s*|\s+)" + _VALUE)
# a whole `|`-separated field that is `words: value` (Megatron-LM): the words are the name
_WORD = r"[\w()/%@.\-]*"
_LABELED = re.compile(r"\s*(?P<k>[A-Za-z]" + _WORD + r"(?: [A-Za-z(]" + _WORD + r"){0,7}?)\s*(?:[:=]\s*|\s+)" + _VALUE + r"\s*")
_SOURCE_FILE = re.compile(r"\.(?:py|pyx|cpp|cc|c|h|hpp|cu|cuh|rs|go|js|ts|java|sh)$", re.I)
_TQDM = re.compile(r"\|\s*(\d+)/(\d+)\s*\[")
# An epoch and a batch of it, [batch/batches]: timm's `Train: 3 [  20/50 ( 40%)]` and `Test: [  10/20]`,
# the PyTorch ImageNet example's `Epoch: [0][  10/5005]`, the tutorials' `Epoch [1/5], Step [100/600]`
_EPOCH_BATCH = re.compile(
    r"(?<![\w.])(?:(?P<split>Train|Test|Eval|Val|Validation)(?P<ema> \(EMA\))?: (?:(?P<e1>\d+) )?\[\s*(?P<i1>\d+)/(?P<n1>\d+)"
    r"|[Ee]poch:? ?\[\s*(?P<e2>\d+)(?:/\d+)?\],? ?(?:(?:[Ss]tep|[Ii]ter|[Ii]teration|[Bb]atch):? ?)?\[\s*(?P<i2>\d+)/(?P<n2>\d+)\])")

STEP_KEYS = ("global_step", "step", "num_updates", "iteration", "iter", "it", "steps", "epoch")
_SPLIT_WORDS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val",
                "validate": "val", "eval": "eval", "evaluation": "eval", "evaluate": "eval", "test": "test",
                "testing": "test"}
_SPLIT_WORD = re.compile(r"(?<![\w.@/\-])(" + "|".join(_SPLIT_WORDS) + r")(?![\w.@/\-])", re.I)
_HAS_SPLIT = re.compile(r"(?:^|[^a-z])(?:train|training|val|valid|validation|eval|evaluation|test|dev)(?:[^a-z]|$)|^(?:val|eval|test|valid)", re.I)
_SPLIT_PREFIX = re.compile(r"^(?:train|valid|val|eval|test)_", re.I)
# words that make one name with the key they precede: `learning rate`, `grad norm`, `lm loss`, `loss scale`
_COMPOUND = {"grad", "gradient", "learning", "lm", "loss", "param", "params", "weight", "total", "avg", "average",
             "mean", "global", "batch", "per", "elapsed", "time", "tokens", "samples", "consumed"}
_WORDS_BEFORE = re.compile(r"((?:[A-Za-z]+ ){1,4})\Z")


class Field(NamedTuple):
    key: str
    value: str
    start: int  # span of the number
    end: int
    unit_end: int  # end of the unit glued to it (== end without one)
    key_start: int  # where its name starts on the line
    named: bool = False  # the name is a whole label already (`| lm loss: ... |`)


def step_rank(key: str) -> int | None:
    """Rank of a key as the line's step (lower wins), None when it is not a step key."""
    k = _SPLIT_PREFIX.sub("", key.lower().rsplit("/", 1)[-1])  # valid_num_updates, train/global_step
    return STEP_KEYS.index(k) if k in STEP_KEYS else None


def step_index(pairs: list[tuple[str, str]]) -> int | None:
    ranks = [(r, i) for i, (k, _) in enumerate(pairs) if (r := step_rank(k)) is not None]
    return min(ranks)[1] if ranks else None


# `[pretrain] epoch 1/4 loss 0.99` then `{'loss': 1.94, 'epoch': 1.11}`: a tag in brackets that opens a line names
# the phase (a pre-training before the fine-tune, a teacher before the student); its losses are another series.
# Log levels, ranks and splits are not phases; a tag on every line (`[titan] ...`) is dropped again by log_metrics
_TAG = r"[A-Za-z][A-Za-z0-9_\-]*"
_PHASE_TAG = re.compile(r"^\s*\[(" + _TAG + r")\]")
_NOT_PHASE = re.compile(r"(?:info|debug|warn|warning|error|critical|fatal|notice|trace|main|root|"
                        r"(?:rank|gpu|cuda|worker|default|node|proc|process|device|local)\d*)$", re.I)
PHASE_SEP = ":"


def phase_tag(line: str) -> str | None:
    m = _PHASE_TAG.match(line)
    if not m or _NOT_PHASE.match(m[1]) or m[1].lower() in _SPLIT_WORDS or step_rank(m[1]) is not None:
        return None
    return m[1]


def lone_tag(plain: str, keys: list[str]) -> str | None:
    """The one phase-tagged key that stands for `plain`, when the log has no untagged `plain` beside it (a tag every
    line carries, torchtitan's `[titan]`, names no phase); None otherwise."""
    tagged = [k for k in keys if k != plain and untagged(k) == plain]
    return tagged[0] if len(tagged) == 1 and plain not in keys else None


def untagged(key: str) -> str:
    """`pretrain:loss` -> `loss`: the series name without the phase a bracketed tag gave it."""
    tag, sep, rest = key.partition(PHASE_SEP)
    return rest if sep and rest and re.fullmatch(_TAG, tag) else key


def fields(line: str) -> tuple[list[Field], int | None, bool]:
    """The named values of a line, the index of its step field (None: the line names no step), and whether
    the line can become a template (False when the step is computed, not printed: tqdm bars, timm)."""
    found = _pipe_fields(line) if line.count("|") >= 2 else _kv_fields(line, 0, len(line))
    if not found:
        return [], None, True
    found, line_split = _qualified(line, found)
    eb = _EPOCH_BATCH.search(line)
    if eb:
        return _phased(line, *_epoch_batch(found, eb))
    tq = _TQDM.search(line)
    if tq:
        return _phased(line, *_tqdm(found, tq))
    if line_split:
        found = [_with_split(f, line_split) for f in found]
    step = step_index([(f.key, f.value) for f in found])
    if step is not None and len(found) == 1 and found[0].key.lower().endswith("steps"):
        return [], None, True  # `Total optimization steps = 375`: a setting, not the run's step
    return _phased(line, found, step, True)


def _phased(line: str, found: list[Field], step: int | None, templatable: bool):
    """The line's losses and metrics named after the phase its opening tag names (the step and the LR are the
    run's own)."""
    tag = phase_tag(line)
    if tag:
        found = [f._replace(key=f"{tag}{PHASE_SEP}{f.key}") if i != step and kind(f.key) in ("loss", "metric")
                 else f for i, f in enumerate(found)]
    return found, step, templatable


# `warmup 1 epoch`, `decay 30 epochs`: a count in another unit than the key says; it becomes `warmup_epochs`
# (not `epoch 3 step 100`: there `step` names the next value)
_COUNT_UNIT = re.compile(r"\s+(epoch|epochs|ep|steps|step|iters|iterations|batches|tokens)\b(?!\s*[:=/]?\s*[-+]?\d)", re.I)


def _kv_fields(line: str, start: int, end: int) -> list[Field]:
    out = []
    for m in KV.finditer(line, start, end):
        if _SOURCE_FILE.search(m["k"]):
            continue  # "[train.py:212]" is where the logger was called, not a metric
        key = m["k"]
        unit = _COUNT_UNIT.match(line, m.end("u") if m["u"] else m.end("v"))
        if unit and not line[m.end("k"):m.start("v")].strip():  # `key value unit`, not `key=value, next`
            plural = unit[1].lower().rstrip("s")
            plural = {"ep": "epoch", "iteration": "iter"}.get(plural, plural) + "s"
            key = key if key.lower().endswith(plural) else f"{key}_{plural}"
        out.append(Field(key, m["v"], m.start("v"), m.end("v"), m.end("u") if m["u"] else m.end("v"), m.start()))
    return out


def _pipe_fields(line: str) -> list[Field]:
    out, pos = [], 0
    for part in line.split("|"):
        end = pos + len(part)
        m = _LABELED.fullmatch(line, pos, end)
        label = m["k"] if m else ""
        words = label.split(" ")
        if m and (len(words) > 1 or not re.fullmatch(r"[A-Za-z_][\w./\-@]*", label)) \
                and not (len(words) > 1 and step_rank(words[-1]) is not None):
            out.append(Field(_label_key(label), m["v"], m.start("v"), m.end("v"), m.end("u") if m["u"] else m.end("v"),
                             m.start("k"), named=True))
        else:
            out += _kv_fields(line, pos, end)
        pos = end + 1
    return out


def _label_key(label: str) -> str:
    """`elapsed time per iteration (ms)` -> `elapsed_time_per_iteration_ms`; `lm loss value` -> `lm_loss`."""
    key = re.sub(r"[^0-9a-z@]+", "_", label.lower().replace("%", "pct")).strip("_")
    key = re.sub(r"_value$", "", key)
    words = key.split("_")
    if words[0] in _SPLIT_WORDS and len(words) > 1:
        key = "_".join([_SPLIT_WORDS[words[0]], *words[1:]])
    return key


def _qualified(line: str, found: list[Field]) -> tuple[list[Field], str | None]:
    """Fold the words before each key into its name (`train loss` -> `train_loss`, `learning rate` ->
    `learning_rate`); and the split a whole line is about, when a word before its first field says so
    (`validate step: 10 ...`, `| valid | {...}`, `validation loss at iteration 100 | ...`)."""
    out, first = [], None
    for f in found:
        start = f.key_start
        m = None if f.named else _WORDS_BEFORE.search(line, max(0, start - 60), start)
        if m and step_rank(f.key) is None:
            spans = [w.span() for w in re.finditer(r"[A-Za-z]+", m.group(1))]
            words = [m.group(1)[a:b].lower() for a, b in spans]
            take = []
            while words and words[-1] in _COMPOUND and len(take) < 3:
                take.insert(0, words.pop())
            split = _SPLIT_WORDS[words.pop()] if words and words[-1] in _SPLIT_WORDS else None
            if take or split:
                key = "_".join([*take, f.key.lower()]) if take else f.key
                if split and not _HAS_SPLIT.search(key):
                    key = f"{split}_{key}"
                f = f._replace(key=key)
                start = m.start(1) + spans[len(words)][0]
        elif m and " per " in f" {m.group(1)}":  # `time per iteration 12.3`: a duration, not the step
            f = f._replace(key=_label_key(m.group(1) + f.key))
        out.append(f)
        first = start if first is None else first
    splits = _SPLIT_WORD.findall(line, 0, first or 0)
    return out, (_SPLIT_WORDS[splits[-1].lower()] if splits else None)


def _with_split(f: Field, split: str) -> Field:
    """A field on a line about one split carries it in its name (train only for losses and metrics:
    a train line's lr or step time is the run's own)."""
    if step_rank(f.key) is not None or _HAS_SPLIT.search(f.key):
        return f
    if split == "train" and kind(f.key) not in ("loss", "metric"):
        return f
    return f._replace(key=f"{split}_{f.key}")


def _epoch_batch(found: list[Field], m: re.Match) -> tuple[list[Field], int | None, bool]:
    """Batch i of n in epoch e is step e*n + i (the batch count restarts every epoch; the step must not)."""
    split = _SPLIT_WORDS[m["split"].lower()] + ("_ema" if m["ema"] else "") if m["split"] else None
    rest = [f for f in found if f.start >= m.end()]
    if split:
        rest = [_with_split(f, split) for f in rest]
    e, i, n = (m["e1"], m["i1"], m["n1"]) if m["i1"] else (m["e2"], m["i2"], m["n2"])
    if e is None:  # an evaluation batch (`Test: [ 10/20]`): it takes the step of the training line above
        return rest, None, True
    g = "e1" if m["i1"] else "e2"
    out = [Field("epoch", e, m.start(g), m.end(g), m.end(g), m.start()),
           Field("step", str(int(e) * int(n) + int(i)), m.start(), m.end(), m.end(), m.start()), *rest]
    return out, 1, False


def _tqdm(found: list[Field], m: re.Match) -> tuple[list[Field], int | None, bool]:
    """A progress bar: metrics are the postfix (`[..., loss=1.23]`); the step is the bar's count, plus
    epoch x total when the description names the epoch (Lightning's `Epoch 3: 40%|...| 40/100 [...]`)."""
    epoch = next((f for f in found if f.start < m.start() and step_rank(f.key) == STEP_KEYS.index("epoch")), None)
    post = [f for f in found if f.start > m.start() and f.key != "v_num"]
    epoch = epoch._replace(key="epoch") if epoch else None
    if not post:
        return [], None, False
    own = step_index([(f.key, f.value) for f in post])
    if own is not None and step_rank(post[own].key) != STEP_KEYS.index("epoch"):
        return post, own, False
    n = int(m.group(1)) + (int(float(epoch.value)) * int(m.group(2)) if epoch else 0)
    out = ([epoch] if epoch else []) + [Field("step", str(n), m.start(1), m.end(1), m.end(1), m.start(1))] + post
    return out, len(out) - len(post) - 1, False


# --------------------------------------------------------------------------- what a series is

Kind = Literal["loss", "lr", "grad_norm", "throughput", "memory", "metric"]
_THROUGHPUT = re.compile(
    r"(?:^|[^a-z])(?:time|times|elapsed|runtime|wall|dt|latency|duration|data|tps|wps|ups|mfu|tflops|flops|"
    r"throughput|speed|iter_time|step_time)(?:[^a-z]|$)|per_?sec|per_?second|/s(?:$|[^a-z])|tokens?_?s$|it_?s$|_ms$")
_MEMORY = re.compile(r"(?:^|[^a-z])(?:mem|memory|gb_free|reserved|allocated|rss|vram)(?:[^a-z]|$)")
_GRAD_NORM = re.compile(r"gnorm|grad_?norm|gradient_?norm|grad/norm")


def is_lr(name: str) -> bool:
    k = name.lower().rsplit("/", 1)[-1]
    return (k in ("lr", "learning_rate", "learningrate") or k.startswith("lr_") or k.endswith("_lr")
            or k.endswith("learning_rate")) and "decay" not in k and "warmup" not in k


def is_val(name: str) -> bool:
    k = name.lower()
    return bool(re.search(r"(?:^|[^a-z])(?:val|valid|validation|eval|evaluation|test|dev)(?:[^a-z]|$)", k)
                or re.match(r"(?:val|eval|test|valid)", k))


def kind(name: str) -> Kind:
    """loss, lr, grad_norm, throughput (time/speed/MFU: not something to optimise the model on), memory, metric."""
    k = name.lower()
    if is_lr(k):
        return "lr"
    if "loss" in k and not re.search(r"loss_?scale|ppl|perplexity", k) and not _THROUGHPUT.search(k.replace("loss", "")):
        return "loss"
    if re.search(r"(^|[_/. -])(nll|xent|cross_?entropy)($|[_/. -])", k):  # a loss by another name
        return "loss"
    # a regression's objective printed by its name (train_mse 0.27 | val_mse 0.14): the loss when the log has no
    # series named loss (a series that is, e.g. `loss` beside `val_mae`, is preferred by _pick_loss)
    if re.search(r"(^|[_/. -])(mse|mae|huber|smooth_?l1)($|[_/. -])", k):
        return "loss"
    if _GRAD_NORM.search(k):
        return "grad_norm"
    if _MEMORY.search(k):
        return "memory"
    if _THROUGHPUT.search(k):
        return "throughput"
    return "metric"
