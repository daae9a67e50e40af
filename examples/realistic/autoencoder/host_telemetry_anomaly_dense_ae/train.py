"""Unsupervised anomaly detection on host telemetry with a dense autoencoder.

Each row is a 1-minute aggregate of 24 metrics for one host in the fleet.
Rows overlapping a ticket in the incident tracker are flagged `is_incident`.
The autoencoder is fit on normal operation only; the reconstruction error
is used as the anomaly score and evaluated with ROC-AUC on held-out hosts.
"""
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 7
N_HOSTS = 60
ROWS_PER_HOST = 400
BATCH_SIZE = 128
EPOCHS = 30
LR = 2e-3
WEIGHT_DECAY = 1e-5
LATENT_DIM = 4

FEATURES = [
    "cpu_user", "cpu_sys", "cpu_iowait", "load1", "load5", "ctx_switches",
    "mem_used", "mem_cached", "swap_used", "gc_pause_ms", "heap_used", "threads",
    "disk_read_mbs", "disk_write_mbs", "disk_queue", "disk_await_ms",
    "net_in_mbs", "net_out_mbs", "tcp_retrans", "conn_open",
    "req_rate", "lat_p50_ms", "lat_p99_ms", "err_rate",
]


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def simulate_fleet(seed=SEED):
    """Synthetic stand-in for the telemetry export (one frame, all hosts)."""
    rng = np.random.default_rng(seed)
    n_feat = len(FEATURES)
    # four latent drivers: traffic, batch jobs, cache pressure, background io
    mix = rng.normal(0, 1, size=(4, n_feat))
    mix[0, [0, 3, 4, 16, 17, 19, 20, 21]] += 2.0
    mix[1, [0, 1, 5, 11, 12, 13]] += 1.5
    mix[2, [6, 7, 10, 9]] += 1.5
    mix[3, [2, 12, 13, 14, 15]] += 1.5
    base = rng.uniform(5, 50, size=n_feat)
    scale = rng.uniform(1, 10, size=n_feat)

    # incident signatures (direction in metric space, in units of `scale`)
    signatures = {
        "mem_leak": {"mem_used": 3.0, "swap_used": 3.5, "gc_pause_ms": 4.0, "heap_used": 3.0, "lat_p99_ms": 2.5},
        "net_saturation": {"net_in_mbs": 3.5, "net_out_mbs": 3.5, "tcp_retrans": 4.0, "lat_p50_ms": 2.0, "lat_p99_ms": 3.0, "err_rate": 2.0},
        "disk_contention": {"cpu_iowait": 4.0, "disk_queue": 4.0, "disk_await_ms": 3.5, "lat_p99_ms": 2.0, "load1": 2.0},
    }
    sig_vecs = []
    for sig in signatures.values():
        v = np.zeros(n_feat)
        for k, a in sig.items():
            v[FEATURES.index(k)] = a
        sig_vecs.append(v)

    frames = []
    for h in range(N_HOSTS):
        t = np.arange(ROWS_PER_HOST)
        phase = rng.uniform(0, 2 * math.pi)
        traffic = np.sin(2 * math.pi * t / 240 + phase) + 0.3 * rng.normal(size=t.size)
        batch = (rng.random(t.size) < 0.2).astype(float) * rng.uniform(0.5, 2.0, t.size)
        cache = np.cumsum(rng.normal(0, 0.1, t.size)); cache -= cache.mean()
        bgio = rng.gamma(2.0, 0.5, t.size) - 1.0
        z = np.stack([traffic, batch, cache, bgio], 1)
        lin = z @ mix
        x = base + scale * (0.6 * lin + 0.25 * np.tanh(lin) ** 2 + 0.35 * rng.normal(size=lin.shape))

        incident = np.zeros(t.size, dtype=int)
        # incidents are episodes of 10-40 minutes
        n_ep = rng.poisson(2.0)
        for _ in range(n_ep):
            start = rng.integers(0, t.size - 40)
            length = rng.integers(10, 40)
            kind = rng.integers(0, len(sig_vecs))
            sev = rng.uniform(0.25, 0.7)
            x[start:start + length] += scale * sev * sig_vecs[kind] * (1 + 0.2 * rng.normal(size=(length, 1)))
            incident[start:start + length] = 1

        df = pd.DataFrame(x, columns=FEATURES)
        df.insert(0, "host", f"host-{h:03d}")
        df.insert(1, "minute", t)
        df["is_incident"] = incident
        frames.append(df)
    return pd.concat(frames, ignore_index=True)


class Standardizer:
    def fit(self, x):
        self.mean_ = x.mean(0, keepdims=True)
        self.std_ = x.std(0, keepdims=True) + 1e-6
        return self

    def transform(self, x):
        return ((x - self.mean_) / self.std_).astype(np.float32)


def build_data(seed=SEED):
    df = simulate_fleet(seed)
    hosts = np.array(sorted(df.host.unique()))
    rng = np.random.default_rng(seed)
    rng.shuffle(hosts)
    n_val = len(hosts) // 5
    val_hosts, train_hosts = hosts[:n_val], hosts[n_val:]

    train_df = df[df.host.isin(train_hosts)]
    val_df = df[df.host.isin(val_hosts)]

    # the autoencoder should only ever see normal operation
    normal_train = train_df[train_df.is_incident == 0]
    scaler = Standardizer().fit(normal_train[FEATURES].values)
    X_train = scaler.transform(train_df[FEATURES].values)

    X_val = scaler.transform(val_df[FEATURES].values)
    y_val = val_df.is_incident.values.astype(int)
    return X_train, X_val, y_val, df


def make_loaders(X_train, batch_size=BATCH_SIZE, seed=SEED):
    g = torch.Generator().manual_seed(seed)
    ds = TensorDataset(torch.from_numpy(X_train))
    return DataLoader(ds, batch_size=batch_size, shuffle=True, drop_last=True, generator=g)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class DenseAE(nn.Module):
    def __init__(self, n_in, latent=LATENT_DIM, hidden=(64, 32)):
        super().__init__()
        h1, h2 = hidden
        self.encoder = nn.Sequential(
            nn.Linear(n_in, h1), nn.GELU(),
            nn.Linear(h1, h2), nn.GELU(),
            nn.Linear(h2, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, h2), nn.GELU(),
            nn.Linear(h2, h1), nn.GELU(),
            nn.Linear(h1, n_in),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def recon_loss(model, batch):
    (x,) = batch
    return nn.functional.mse_loss(model(x), x)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty_like(order, dtype=float)
    ranks[order] = np.arange(1, len(scores) + 1)
    # average ranks for ties
    s_sorted = scores[order]
    i = 0
    while i < len(s_sorted):
        j = i
        while j + 1 < len(s_sorted) and s_sorted[j + 1] == s_sorted[i]:
            j += 1
        if j > i:
            ranks[order[i:j + 1]] = (i + j + 2) / 2.0
        i = j + 1
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def evaluate(model, X_val, y_val):
    model.eval()
    x = torch.from_numpy(X_val)
    err = ((model(x) - x) ** 2).mean(1).numpy()
    model.train()
    normal_mse = err[y_val == 0].mean()
    return float(normal_mse), float(roc_auc(err, y_val))


def make_target():
    torch.manual_seed(SEED)
    X_train, _, _, _ = build_data()
    loader = make_loaders(X_train)
    data = []
    for i, b in enumerate(loader):
        data.append(b)
        if i == 3:
            break
    return {
        "model": DenseAE(X_train.shape[1]),
        "data": data,
        "loss_fn": recon_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    np.random.seed(SEED)
    t0 = time.time()
    X_train, X_val, y_val, df = build_data()
    print(f"fleet: {df.host.nunique()} hosts, {len(df)} rows, incident rate {df.is_incident.mean():.3f}")
    print(f"train rows: {len(X_train)}  val rows: {len(X_val)} (val incident rows: {int(y_val.sum())})")
    loader = make_loaders(X_train)

    model = DenseAE(X_train.shape[1])
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=EPOCHS * len(loader))
    print(f"model params: {sum(p.numel() for p in model.parameters())}")

    best_auc = 0.0
    for epoch in range(1, EPOCHS + 1):
        te = time.time()
        running, n = 0.0, 0
        for batch in loader:
            loss = recon_loss(model, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            running += loss.item() * batch[0].size(0)
            n += batch[0].size(0)
        val_mse, val_auc = evaluate(model, X_val, y_val)
        best_auc = max(best_auc, val_auc)
        print(f"Epoch {epoch}/{EPOCHS} - {time.time() - te:.1f}s - loss: {running / n:.4f} "
              f"- val_normal_mse: {val_mse:.4f} - val_auroc: {val_auc:.4f} - lr: {sched.get_last_lr()[0]:.2e}")
    print(f"final val_auroc: {val_auc:.4f}  best val_auroc: {best_auc:.4f}  wall: {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
