# GRU forecaster for 5-bar-ahead intraday returns from a window of past bars.
# Short-horizon returns are mostly noise; a useful model reaches an out-of-sample
# R^2 of a few percent at best.
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# -----------------------------------------------------------------------------
# config
out_dir = os.path.dirname(os.path.abspath(__file__))
data_path = os.path.join(out_dir, "bars.npz")
seed = 1337
n_assets = 24
n_bars = 1500
window = 24
horizon = 5
train_frac = 0.7
batch_size = 128
max_iters = 800
eval_interval = 100
log_interval = 50
eval_iters = 16
learning_rate = 2e-3
min_lr = 2e-4
warmup_iters = 100
lr_decay_iters = 800
weight_decay = 1e-2
grad_clip = 1.0
hidden = 32
n_feat = 4
# -----------------------------------------------------------------------------


def simulate_bars(path, seed=seed):
    """Synthetic bars: returns with a small predictable component (slow order-flow
    pressure + short-term reversal) buried in fat-tailed noise with volatility clustering."""
    rng = np.random.default_rng(seed)
    A, T = n_assets, n_bars
    ret = np.zeros((A, T), np.float32)
    vol = np.zeros((A, T), np.float32)
    imb = np.zeros((A, T), np.float32)
    spread = np.zeros((A, T), np.float32)
    pressure = np.zeros(A)
    sigma = np.full(A, 1.0)
    for t in range(T):
        flow = rng.normal(0, 1, A)
        pressure = 0.9 * pressure + 0.1 * flow * 3.0        # slowly-varying order-flow pressure
        sigma = np.sqrt(0.05 + 0.9 * sigma ** 2 + 0.05 * (ret[:, t - 1] ** 2 if t else 0))
        mu = 0.25 * pressure - (0.08 * ret[:, t - 1] if t else 0)
        ret[:, t] = mu + sigma * rng.standard_t(5, A) * 0.8
        imb[:, t] = flow                                    # observed noisy order imbalance
        vol[:, t] = np.log(sigma) + rng.normal(0, 0.3, A)   # log volume tracks volatility
        spread[:, t] = 0.5 * sigma + rng.gamma(2.0, 0.1, A)
    np.savez(path, ret=ret, vol=vol, imb=imb, spread=spread)


def make_windows(d, t0, t1):
    """All (window, target) pairs whose target window lies in [t0, t1)."""
    feats = np.stack([d["ret"], d["vol"], d["imb"], d["spread"]], -1)  # (A, T, F)
    fut = np.stack([d["ret"][:, t + 1:t + 1 + horizon].sum(1) if t + 1 + horizon <= d["ret"].shape[1]
                    else np.full(d["ret"].shape[0], np.nan) for t in range(d["ret"].shape[1])], 1)
    X, y = [], []
    for t in range(max(t0, window - 1), t1 - horizon - 1):
        X.append(feats[:, t - window + 1:t + 1])
        y.append(fut[:, t])
    X = np.concatenate(X, 0).astype(np.float32)
    y = np.concatenate(y, 0).astype(np.float32)
    return X, y


def load_data():
    if not os.path.exists(data_path):
        simulate_bars(data_path)
    d = dict(np.load(data_path))
    T = d["ret"].shape[1]
    split = int(train_frac * T)
    Xtr, ytr = make_windows(d, 0, split)
    Xva, yva = make_windows(d, split, T)          # chronological hold-out, no overlap of targets
    mu, sd = Xtr.reshape(-1, n_feat).mean(0), Xtr.reshape(-1, n_feat).std(0)
    Xtr, Xva = (Xtr - mu) / sd, (Xva - mu) / sd
    y_mu, y_sd = ytr.mean(), ytr.std()
    ytr, yva = (ytr - y_mu) / y_sd, (yva - y_mu) / y_sd
    return torch.from_numpy(Xtr), torch.from_numpy(ytr), torch.from_numpy(Xva), torch.from_numpy(yva)


class GRUForecaster(nn.Module):
    def __init__(self, n_feat=n_feat, hidden=hidden, dropout=0.1):
        super().__init__()
        self.inp = nn.Linear(n_feat, hidden)
        self.gru = nn.GRU(hidden, hidden, num_layers=1, batch_first=True)
        self.drop = nn.Dropout(dropout)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        h, _ = self.gru(torch.tanh(self.inp(x)))
        return self.head(self.drop(h[:, -1])).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


class BatchSampler:
    """Random minibatches drawn with replacement, nanoGPT-style get_batch."""
    def __init__(self, X, y, batch_size, gen):
        self.X, self.y, self.bs, self.gen = X, y, batch_size, gen

    def get(self):
        ix = torch.randint(len(self.X), (self.bs,), generator=self.gen)
        return self.X[ix], self.y[ix]


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


def configure_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=(0.9, 0.99))


def build():
    torch.manual_seed(seed)
    Xtr, ytr, Xva, yva = load_data()
    gen = torch.Generator().manual_seed(seed)
    train_sampler = BatchSampler(Xtr, ytr, batch_size, gen)
    model = GRUForecaster()
    optimizer = configure_optimizer(model)
    return model, optimizer, train_sampler, (Xtr, ytr, Xva, yva)


def make_target():
    model, optimizer, sampler, (Xtr, ytr, Xva, yva) = build()
    batches = [sampler.get() for _ in range(8)]
    return {
        "model": model,
        "data": batches,
        "val_data": [(Xva[i:i + 512], yva[i:i + 512]) for i in range(0, 2048, 512)],
        "loss_fn": loss_fn,
        "optimizer": optimizer,
        "task": "regression",
    }


@torch.no_grad()
def estimate_loss(model, Xtr, ytr, Xva, yva, gen):
    model.eval()
    out = {}
    ix = torch.randint(len(Xtr), (eval_iters * batch_size,), generator=gen)
    out["train"] = F.mse_loss(model(Xtr[ix]), ytr[ix]).item()
    preds = torch.cat([model(Xva[i:i + 2048]) for i in range(0, len(Xva), 2048)])
    out["val"] = F.mse_loss(preds, yva).item()
    out["val_r2"] = 1.0 - ((preds - yva) ** 2).sum().item() / ((yva - yva.mean()) ** 2).sum().item()
    out["val_ic"] = torch.corrcoef(torch.stack([preds, yva]))[0, 1].item()
    model.train()
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    model, optimizer, sampler, (Xtr, ytr, Xva, yva) = build()
    eval_gen = torch.Generator().manual_seed(seed + 1)
    print(f"train windows: {len(Xtr):,} | val windows: {len(Xva):,} | window={window} horizon={horizon}")
    print(f"number of parameters: {sum(p.numel() for p in model.parameters()):,}")
    # a constant forecast at the train mean (=0 after standardisation)
    const_val = F.mse_loss(torch.zeros_like(yva), yva).item()
    print(f"constant-forecast val loss {const_val:.4f}")

    t0 = time.time()
    best_val = float("inf")
    for it in range(max_iters + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr

        if it % eval_interval == 0:
            m = estimate_loss(model, Xtr, ytr, Xva, yva, eval_gen)
            print(f"step {it}: train loss {m['train']:.4f}, val loss {m['val']:.4f}, "
                  f"val r2 {m['val_r2']:.4f}, val ic {m['val_ic']:.4f}")
            if m["val"] < best_val:
                best_val = m["val"]
                torch.save(model.state_dict(), os.path.join(out_dir, "ckpt.pt"))
        if it == max_iters:
            break

        x, y = sampler.get()
        loss = loss_fn(model, (x, y))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
        optimizer.step()

        t1 = time.time()
        dt, t0 = t1 - t0, t1
        if it % log_interval == 0:
            print(f"iter {it}: loss {loss.item():.4f}, time {dt * 1000:.2f}ms, lr {lr:.2e}")
    print(f"best val loss {best_val:.4f} vs constant {const_val:.4f}")
