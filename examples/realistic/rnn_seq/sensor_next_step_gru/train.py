"""Next-step forecaster for vibration sensor traces.

Traces have different durations; each batch is padded to its longest trace and
the GRU runs on a packed sequence. Loss is MSE over the real (unpadded) steps.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence

torch.set_num_threads(1)

# -----------------------------------------------------------------------------
seed = 2024
n_train_traces = 2000
n_val_traces = 400
min_len, max_len = 24, 96
sensor_noise = 0.2
batch_size = 32
hidden_size = 48
n_layers = 2
dropout = 0.2
learning_rate = 3e-3
max_iters = 400
warmup_iters = 30
min_lr = 3e-4
eval_interval = 50
log_interval = 20
grad_clip = 1.0
# -----------------------------------------------------------------------------


def simulate_traces(n, rng):
    """Two rotating components (shaft + bearing harmonic) plus sensor noise."""
    traces = []
    for _ in range(n):
        T = rng.integers(min_len, max_len + 1)
        t = np.arange(T, dtype=np.float32)
        f1 = rng.uniform(0.04, 0.12)
        f2 = f1 * rng.uniform(2.0, 3.5)
        a1, a2 = rng.uniform(0.6, 1.2), rng.uniform(0.2, 0.5)
        p1, p2 = rng.uniform(0, 2 * np.pi, size=2)
        clean = a1 * np.sin(2 * np.pi * f1 * t + p1) + a2 * np.sin(2 * np.pi * f2 * t + p2)
        traces.append((clean + sensor_noise * rng.standard_normal(T)).astype(np.float32))
    return traces


def make_splits():
    rng = np.random.default_rng(seed)
    train = simulate_traces(n_train_traces, rng)
    val = simulate_traces(n_val_traces, rng)
    return train, val


def collate(traces):
    """inputs x[0:T-1], targets x[1:T], padded to the longest trace in the batch."""
    xs = [torch.from_numpy(tr[:-1]) for tr in traces]
    ys = [torch.from_numpy(tr[1:]) for tr in traces]
    lengths = torch.tensor([len(x) for x in xs])
    x = pad_sequence(xs, batch_first=True).unsqueeze(-1)
    y = pad_sequence(ys, batch_first=True)
    mask = torch.arange(x.size(1))[None, :] < lengths[:, None]
    return x, y, lengths, mask


def get_batch(traces, gen):
    idx = torch.randint(len(traces), (batch_size,), generator=gen)
    return collate([traces[i] for i in idx.tolist()])


class GRUForecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(1, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, num_layers=n_layers, batch_first=True, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(hidden_size, 1)

    def forward(self, x, lengths):
        h = self.drop(torch.tanh(self.inp(x)))
        packed = pack_padded_sequence(h, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=x.size(1))
        return self.out(self.drop(out)).squeeze(-1)


def masked_mse(pred, y, mask):
    m = mask.float()
    return ((pred - y) ** 2 * m).sum() / m.sum()


def loss_fn(model, batch):
    x, y, lengths, mask = batch
    return masked_mse(model(x, lengths), y, mask)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=learning_rate, betas=(0.9, 0.99), weight_decay=1e-4)


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / warmup_iters
    ratio = (it - warmup_iters) / (max_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def make_target():
    torch.manual_seed(seed)
    train, _ = make_splits()
    gen = torch.Generator().manual_seed(seed)
    return {
        "model": GRUForecaster(),
        "data": [get_batch(train, gen) for _ in range(4)],
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


@torch.no_grad()
def estimate_val_loss(model, traces):
    model.eval()
    se, n = 0.0, 0
    for i in range(0, len(traces), 100):
        x, y, lengths, mask = collate(traces[i:i + 100])
        pred = model(x, lengths)
        se += (((pred - y) ** 2) * mask.float()).sum().item()
        n += mask.sum().item()
    model.train()
    return se / n


def main():
    torch.manual_seed(seed)
    train, val = make_splits()
    gen = torch.Generator().manual_seed(seed)
    model = GRUForecaster()
    optimizer = make_optimizer(model.parameters())
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()) / 1e3:.1f}K")
    print(f"train traces: {len(train)}, val traces: {len(val)}, lengths {min_len}-{max_len}")

    model.train()
    running = None
    t0 = time.time()
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr

        if it % eval_interval == 0:
            val_loss = estimate_val_loss(model, val)
            train_str = f"{running:.4f}" if running is not None else "n/a"
            print(f"step {it}: train loss {train_str}, val loss {val_loss:.4f}")
        if it == max_iters:
            break

        batch = get_batch(train, gen)
        loss = loss_fn(model, batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        running = loss.item() if running is None else 0.9 * running + 0.1 * loss.item()
        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, lr {lr:.2e}, time {dt * 1000:.2f}ms")


if __name__ == "__main__":
    main()
