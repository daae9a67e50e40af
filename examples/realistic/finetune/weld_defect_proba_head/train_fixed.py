"""Fine-tune a pretrained 1-D conv encoder to flag defective weld seams.

Each example is a 128-sample welding-current trace; label 1 = the seam was
rejected at inspection. The encoder (backbone.pt, see pretrain.py) is loaded,
its first two blocks stay frozen, the rest is fine-tuned together with a new
probability head. The loop follows the HF Trainer conventions (compute_loss,
logging_steps, linear schedule with warmup, per-epoch evaluation).
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
SEQ_LEN = 128


# ---------------------------------------------------------------- backbone
class ConvBlock(nn.Module):
    def __init__(self, cin, cout, k=5, pool=2):
        super().__init__()
        self.conv = nn.Conv1d(cin, cout, k, padding=k // 2, bias=False)
        self.norm = nn.BatchNorm1d(cout)
        self.act = nn.GELU()
        self.pool = nn.MaxPool1d(pool) if pool > 1 else nn.Identity()

    def forward(self, x):
        return self.pool(self.act(self.norm(self.conv(x))))


class SignalEncoder(nn.Module):
    """(B, 1, L) waveform -> (B, 2 * hidden_size) embedding (mean + max pooled)."""

    def __init__(self, hidden_size=64):
        super().__init__()
        self.hidden_size = hidden_size
        self.out_dim = 2 * hidden_size
        self.blocks = nn.ModuleList([
            ConvBlock(1, 16, k=7),
            ConvBlock(16, 32),
            ConvBlock(32, hidden_size),
            ConvBlock(hidden_size, hidden_size, k=3, pool=1),
        ])

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return torch.cat([x.mean(-1), x.amax(-1)], dim=1)


# ---------------------------------------------------------------- task model
class ProbabilityHead(nn.Module):
    """Classifier block that outputs P(defect); the serving code consumes probabilities."""

    def __init__(self, in_dim, dropout=0.1):
        super().__init__()
        self.block = nn.Sequential(
            nn.Dropout(dropout),
            nn.Linear(in_dim, 64),
            nn.GELU(),
            nn.Linear(64, 1),
            nn.Sigmoid(),
        )

    def forward(self, h):
        return self.block(h).squeeze(-1)


class WeldDefectClassifier(nn.Module):
    def __init__(self, encoder, freeze_blocks=2):
        super().__init__()
        self.encoder = encoder
        self.classifier = ProbabilityHead(encoder.out_dim)
        for blk in self.encoder.blocks[:freeze_blocks]:
            for p in blk.parameters():
                p.requires_grad_(False)

    def forward(self, signal):
        return {"probs": self.classifier(self.encoder(signal))}


def load_model():
    enc = SignalEncoder()
    enc.load_state_dict(torch.load(os.path.join(HERE, "backbone.pt"), map_location="cpu"))
    return WeldDefectClassifier(enc)


# ---------------------------------------------------------------- data
def weld_trace(rng, defect):
    t = np.linspace(0, 1, SEQ_LEN, dtype=np.float32)
    f = rng.uniform(6, 10)
    duty = rng.uniform(0.4, 0.6)
    base = rng.uniform(0.8, 1.2) * (((f * t + rng.uniform()) % 1.0) < duty).astype(np.float32)
    s = base + 0.2 * np.sin(2 * np.pi * rng.uniform(0.5, 2) * t) + rng.normal(0, 0.18, SEQ_LEN)
    if defect:
        sev = rng.uniform(0.5, 1.2)
        for _ in range(rng.integers(1, 4)):
            c = rng.integers(8, SEQ_LEN - 8)
            w = rng.integers(3, 6)
            if rng.random() < 0.5:
                s[c:c + w] -= sev * 1.2          # arc outage
            else:
                s[c:c + w] += sev * rng.normal(0, 1.2, size=w)  # spatter
    return s.astype(np.float32)


def make_dataset(n, seed, pos_rate=0.35, label_noise=0.05):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < pos_rate).astype(np.int64)
    x = np.stack([weld_trace(rng, bool(v)) for v in y])[:, None, :]
    flip = rng.random(n) < label_noise
    y = np.where(flip, 1 - y, y)
    return {"signal": torch.from_numpy(x), "labels": torch.from_numpy(y)}


def iter_batches(ds, bs, shuffle, gen=None):
    n = len(ds["labels"])
    idx = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    for i in range(0, n, bs):
        j = idx[i:i + bs]
        yield {k: v[j] for k, v in ds.items()}


# ---------------------------------------------------------------- trainer bits
@dataclass
class TrainingArguments:
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    num_train_epochs: int = 5
    per_device_train_batch_size: int = 32
    per_device_eval_batch_size: int = 128
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    seed: int = 42


ARGS = TrainingArguments()


def compute_loss(model, inputs, return_outputs=False):
    labels = inputs["labels"].float()
    outputs = model(inputs["signal"])
    loss = F.binary_cross_entropy(outputs["probs"], labels)
    return (loss, outputs) if return_outputs else loss


def create_optimizer(params, args=ARGS):
    params = [p for p in params if p.requires_grad]
    return torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay)


def linear_schedule_with_warmup(optimizer, warmup, total):
    def f(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total - step) / max(1, total - warmup))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)


def compute_metrics(probs, labels):
    preds = (probs >= 0.5).long()
    acc = (preds == labels).float().mean().item()
    tp = ((preds == 1) & (labels == 1)).sum().item()
    prec = tp / max(1, (preds == 1).sum().item())
    rec = tp / max(1, (labels == 1).sum().item())
    f1 = 2 * prec * rec / max(1e-8, prec + rec)
    return {"accuracy": round(acc, 4), "f1": round(f1, 4), "recall": round(rec, 4)}


def evaluate(model, ds, args, epoch):
    model.eval()
    t0 = time.time()
    losses, all_probs = [], []
    with torch.no_grad():
        for batch in iter_batches(ds, args.per_device_eval_batch_size, shuffle=False):
            loss, out = compute_loss(model, batch, return_outputs=True)
            losses.append(loss.item() * len(batch["labels"]))
            all_probs.append(out["probs"])
    model.train()
    metrics = {"eval_loss": round(sum(losses) / len(ds["labels"]), 4)}
    for k, v in compute_metrics(torch.cat(all_probs), ds["labels"]).items():
        metrics[f"eval_{k}"] = v
    rt = time.time() - t0
    metrics.update({"eval_runtime": round(rt, 4),
                    "eval_samples_per_second": round(len(ds["labels"]) / rt, 3),
                    "epoch": round(epoch, 2)})
    return metrics


_DATA = {}


def get_datasets():
    if not _DATA:
        _DATA["train"] = make_dataset(1600, seed=1)
        _DATA["eval"] = make_dataset(500, seed=2)
    return _DATA["train"], _DATA["eval"]


def make_target():
    torch.manual_seed(ARGS.seed)
    train_ds, _ = get_datasets()
    model = load_model()
    gen = torch.Generator().manual_seed(ARGS.seed)
    it = iter_batches(train_ds, ARGS.per_device_train_batch_size, True, gen)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": create_optimizer(model.parameters()),
        "make_optimizer": create_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


def main():
    args = ARGS
    torch.manual_seed(args.seed)
    train_ds, eval_ds = get_datasets()
    model = load_model()
    n_train = len(train_ds["labels"])
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    print("***** Running training *****")
    print(f"  Num examples = {n_train}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {args.per_device_train_batch_size}")
    steps_per_epoch = math.ceil(n_train / args.per_device_train_batch_size)
    max_steps = steps_per_epoch * args.num_train_epochs
    print(f"  Total optimization steps = {max_steps}")
    print(f"  Number of trainable parameters = {trainable:,} (of {total:,})")

    optimizer = create_optimizer(model.parameters(), args)
    scheduler = linear_schedule_with_warmup(optimizer, int(args.warmup_ratio * max_steps), max_steps)
    gen = torch.Generator().manual_seed(args.seed)
    step, tr_loss, logged, running, grad_norm = 0, 0.0, 0, 0.0, 0.0
    t_start = time.time()
    model.train()
    for epoch in range(args.num_train_epochs):
        for batch in iter_batches(train_ds, args.per_device_train_batch_size, True, gen):
            loss = compute_loss(model, batch)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for p in model.parameters() if p.requires_grad], args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            tr_loss += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(running / (step - logged), 4),
                       "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0],
                       "epoch": round(step / steps_per_epoch, 2)})
                running, logged = 0.0, step
        print(evaluate(model, eval_ds, args, epoch + 1.0))
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4),
           "train_samples_per_second": round(n_train * args.num_train_epochs / rt, 3),
           "train_steps_per_second": round(max_steps / rt, 3),
           "train_loss": tr_loss / max_steps,
           "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
