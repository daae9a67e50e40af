"""GRU classifier for note articulation from frame-level loudness envelopes.

Each example is a 100-frame RMS envelope (10 ms hop) of one isolated note from
a practice-room recorder.  Articulation classes:
    pluck    - plucked string: near-instant onset, exponential ring-out
    bowed    - bowed crescendo that is cut off when the bow leaves the string
    tremolo  - sustained note with periodic amplitude modulation
    organ    - sustained note with short, symmetric ramps
Envelopes are synthesised in generate_envelopes(); numbers are logged with the
standard logging module.
"""
import logging
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(format="%(asctime)s %(levelname)s %(message)s", level=logging.INFO)
log = logging.getLogger("articulation")

SEED = 3
T = 100
CLASSES = ["pluck", "bowed", "tremolo", "organ"]
N_TRAIN = 2400
N_VAL = 800
BATCH = 64
EPOCHS = 14
LR = 3e-3
HIDDEN = 64
CLIP = 1.0


def _ring(rng):
    """Envelope of a struck/plucked note: fast rise, exponential decay."""
    onset = rng.integers(5, 30)
    attack = rng.integers(1, 4)
    tau = rng.uniform(10, 30)
    t = np.arange(T, dtype=np.float64)
    env = np.where(t < onset, 0.0,
                   np.where(t < onset + attack, (t - onset + 1) / attack,
                            np.exp(-(t - onset - attack) / tau)))
    return env


def _sustain(rng, kind):
    start = rng.integers(5, 25)
    stop = T - rng.integers(5, 25)
    ramp = rng.integers(3, 8)
    t = np.arange(T, dtype=np.float64)
    env = np.clip(np.minimum((t - start) / ramp, (stop - t) / ramp), 0.0, 1.0)
    if kind == "tremolo":
        rate = rng.uniform(0.08, 0.2)
        depth = rng.uniform(0.3, 0.6)
        env = env * (1 - depth * 0.5 * (1 + np.sin(2 * math.pi * rate * t + rng.uniform(0, 6.3))))
    return env * rng.uniform(0.6, 0.9)


def generate_envelopes(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), n)
    x = np.zeros((n, T), dtype=np.float32)
    for i, c in enumerate(y):
        name = CLASSES[c]
        if name == "pluck":
            env = _ring(rng)
        elif name == "bowed":
            env = _ring(rng)[::-1]
        else:
            env = _sustain(rng, name)
        level = rng.uniform(0.3, 1.0)
        floor = rng.uniform(0.01, 0.05)
        x[i] = level * env + floor + np.abs(rng.normal(0, 0.03, T))
    return x, y


def to_features(env):
    """RMS envelope -> log-compressed loudness, roughly zero-mean."""
    return (np.log(env + 1e-3) + 2.5) / 1.5


class EnvelopeSet(Dataset):
    def __init__(self, x, y, train, seed=0):
        self.x, self.y, self.train = x, y, train
        self.rng = np.random.default_rng(seed)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        env = self.x[i]
        if self.train:
            env = env * self.rng.uniform(0.7, 1.3)
            env = np.roll(env, self.rng.integers(-4, 5))
        feats = to_features(np.ascontiguousarray(env))
        return torch.from_numpy(feats.astype(np.float32)).unsqueeze(-1), int(self.y[i])


def get_loaders():
    xtr, ytr = generate_envelopes(N_TRAIN, SEED)
    xva, yva = generate_envelopes(N_VAL, SEED + 100)
    g = torch.Generator().manual_seed(SEED)
    train_dl = DataLoader(EnvelopeSet(xtr, ytr, True, SEED), batch_size=BATCH, shuffle=True,
                          drop_last=True, generator=g)
    val_dl = DataLoader(EnvelopeSet(xva, yva, False), batch_size=400)
    return train_dl, val_dl


class ArticulationGRU(nn.Module):
    def __init__(self, hidden=HIDDEN, n_classes=len(CLASSES)):
        super().__init__()
        self.inp = nn.Linear(1, 16)
        self.gru = nn.GRU(16, hidden, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        h_seq, h_last = self.gru(torch.tanh(self.inp(x)))
        return self.head(h_last[-1])


criterion = nn.CrossEntropyLoss()


def loss_fn(model, batch):
    x, y = batch
    return criterion(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def make_target():
    torch.manual_seed(SEED)
    train_dl, _ = get_loaders()
    model = ArticulationGRU()
    it = iter(train_dl)
    data = [next(it) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    total, correct, n = 0.0, 0, 0
    hits = np.zeros(len(CLASSES))
    counts = np.zeros(len(CLASSES))
    for x, y in dl:
        logits = model(x)
        total += criterion(logits, y).item() * len(y)
        ok = (logits.argmax(1) == y).numpy()
        correct += ok.sum()
        n += len(y)
        np.add.at(hits, y.numpy(), ok)
        np.add.at(counts, y.numpy(), 1)
    model.train()
    return total / n, correct / n, hits / np.maximum(counts, 1)


def main():
    torch.manual_seed(SEED)
    t0 = time.time()
    train_dl, val_dl = get_loaders()
    model = ArticulationGRU()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=6, gamma=0.3)
    log.info("train=%d val=%d T=%d classes=%s params=%d", len(train_dl.dataset), len(val_dl.dataset),
             T, ",".join(CLASSES), sum(p.numel() for p in model.parameters()))
    step = 0
    for epoch in range(1, EPOCHS + 1):
        run, seen = 0.0, 0
        for x, y in train_dl:
            loss = loss_fn(model, (x, y))
            opt.zero_grad()
            loss.backward()
            gn = nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            run += loss.item() * len(y)
            seen += len(y)
            step += 1
            if step % 50 == 0:
                log.info("step %d loss=%.4f grad_norm=%.3f lr=%.2e", step, loss.item(), gn.item(),
                         opt.param_groups[0]["lr"])
        sched.step()
        val_loss, val_acc, per_cls = evaluate(model, val_dl)
        log.info("epoch %d train_loss=%.4f val_loss=%.4f val_acc=%.3f", epoch, run / seen, val_loss, val_acc)
    log.info("per-class val acc: %s", " ".join(f"{c}={a:.3f}" for c, a in zip(CLASSES, per_cls)))
    log.info("done in %.1fs", time.time() - t0)


if __name__ == "__main__":
    main()
