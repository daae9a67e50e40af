# Next-day cross-sectional return model.
# Panel of daily stock features -> MLP -> next-day excess return (z-scored).
# Walk-forward split by date: first 80% of days train, last 20% validate.
import os
import math
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 1234
OUT_DIR = os.path.dirname(os.path.abspath(__file__))
PANEL_PATH = os.path.join(OUT_DIR, "data", "daily_panel.csv")

N_STOCKS = 300
N_DAYS = 360
SECTORS = ["tech", "health", "energy", "financials", "consumer", "industrials", "utilities", "materials"]

BATCH_SIZE = 512
EPOCHS = 14
MAX_LR = 2e-3
WEIGHT_DECAY = 1e-3
EVAL_EVERY = 1

FEATURES_NUM = ["ret_1d", "ret_5d", "ret_20d", "vol_20d", "volume_z", "log_mcap", "book_to_price",
                "earnings_surprise", "short_interest"]
FEATURES_CAT = ["sector", "dow"]
TARGET = "fwd_ret_1d"


def simulate_panel(path, seed=SEED):
    rng = np.random.default_rng(seed)
    sector = rng.choice(SECTORS, N_STOCKS)
    log_mcap = rng.normal(22.5, 1.4, N_STOCKS)
    btp = rng.lognormal(-0.7, 0.5, N_STOCKS)
    base_vol = 0.012 + 0.01 * rng.random(N_STOCKS) + 0.004 * (23 - log_mcap).clip(0)

    # daily returns: market factor + sector factor + idiosyncratic (fat tailed)
    mkt = rng.standard_t(4, N_DAYS) * 0.008
    sec_f = {s: rng.standard_t(4, N_DAYS) * 0.006 for s in SECTORS}
    eps = rng.standard_t(3, (N_DAYS, N_STOCKS)) / math.sqrt(3) * base_vol
    rets = mkt[:, None] + np.stack([sec_f[s] for s in sector], axis=1) + eps

    volume_z = rng.normal(0, 1, (N_DAYS, N_STOCKS))
    surprise = np.where(rng.random((N_DAYS, N_STOCKS)) < 0.02, rng.normal(0, 1, (N_DAYS, N_STOCKS)), 0.0)
    short_int = np.clip(rng.gamma(2.0, 0.02, N_STOCKS)[None, :] + rng.normal(0, 0.005, (N_DAYS, N_STOCKS)), 0, None)

    # weak predictable component of next-day idiosyncratic return:
    # short-term reversal, post-earnings drift, value tilt, volume-conditioned reversal
    r1 = pd.DataFrame(rets)
    r5 = r1.rolling(5, min_periods=1).sum().to_numpy()
    r20d = r1.rolling(20, min_periods=1).sum().to_numpy()
    vol20 = r1.rolling(20, min_periods=2).std().bfill().to_numpy()
    alpha = -0.15 * rets / base_vol - 0.08 * r5 / (base_vol * math.sqrt(5))
    drift = np.zeros_like(rets)
    for t in range(N_DAYS):  # earnings drift decays over ~10 days
        lo = max(0, t - 10)
        drift[t] = (surprise[lo:t + 1] * np.exp(-(t - np.arange(lo, t + 1))[:, None] / 5.0)).sum(0)
    alpha = alpha + 0.25 * drift + 0.08 * ((np.log(btp) + 0.7) / 0.5)[None, :]
    alpha = alpha - 0.08 * np.tanh(volume_z) * np.sign(rets)
    fwd = np.empty_like(rets)
    fwd[:-1] = rets[1:] + alpha[:-1] * base_vol[None, :] * 0.9
    fwd[-1] = np.nan

    days = pd.bdate_range("2021-01-04", periods=N_DAYS)
    tt, ss = np.meshgrid(np.arange(N_DAYS), np.arange(N_STOCKS), indexing="ij")
    df = pd.DataFrame({
        "date": days[tt.ravel()], "ticker": [f"T{i:04d}" for i in ss.ravel()],
        "sector": sector[ss.ravel()], "ret_1d": rets.ravel(), "ret_5d": r5.ravel(), "ret_20d": r20d.ravel(),
        "vol_20d": vol20.ravel(), "volume_z": volume_z.ravel(), "log_mcap": log_mcap[ss.ravel()],
        "book_to_price": btp[ss.ravel()], "earnings_surprise": surprise.ravel(),
        "short_interest": short_int.ravel(), TARGET: fwd.ravel(),
    })
    os.makedirs(os.path.dirname(path), exist_ok=True)
    df.to_csv(path, index=False, float_format="%.6g")


def prepare(path=PANEL_PATH, train_frac=0.8):
    if not os.path.exists(path):
        simulate_panel(path)
    df = pd.read_csv(path, parse_dates=["date"])
    df = df.dropna(subset=[TARGET])
    df = df[df["date"] >= df["date"].min() + pd.Timedelta(days=30)]  # warm-up for rolling features
    df["dow"] = df["date"].dt.day_of_week.astype(str)

    # sector-neutral target: excess return over the (date, sector) mean, scaled by trailing vol
    df["y"] = (df[TARGET] - df.groupby(["date", "sector"])[TARGET].transform("mean")) / df["vol_20d"].clip(lower=1e-3)

    # walk-forward split by date
    dates = np.sort(df["date"].unique())
    cut = dates[int(len(dates) * train_frac)]
    tr, va = df[df["date"] < cut].copy(), df[df["date"] >= cut].copy()

    # robust scaling: clip to train quantiles then z-score with train stats
    lo, hi = tr[FEATURES_NUM].quantile(0.01), tr[FEATURES_NUM].quantile(0.99)
    for part in (tr, va):
        part[FEATURES_NUM] = part[FEATURES_NUM].clip(lo, hi, axis=1)
    mu, sd = tr[FEATURES_NUM].mean(), tr[FEATURES_NUM].std()
    y_lo, y_hi = tr["y"].quantile(0.005), tr["y"].quantile(0.995)
    y_mu, y_sd = tr["y"].clip(y_lo, y_hi).mean(), tr["y"].clip(y_lo, y_hi).std()

    def to_arrays(part):
        Xn = ((part[FEATURES_NUM] - mu) / sd).to_numpy(np.float32)
        Xc = pd.get_dummies(part[FEATURES_CAT], dtype=np.float32)
        Xc = Xc.reindex(columns=cat_columns, fill_value=0.0).to_numpy(np.float32)
        y = ((part["y"].clip(y_lo, y_hi) - y_mu) / y_sd).to_numpy(np.float32)
        return np.concatenate([Xn, Xc], axis=1), y

    cat_columns = pd.get_dummies(tr[FEATURES_CAT], dtype=np.float32).columns
    X_tr, y_tr = to_arrays(tr)
    X_va, y_va = to_arrays(va)
    return X_tr, y_tr, X_va, y_va, (str(dates[0])[:10], str(cut)[:10], str(dates[-1])[:10])


class ReturnMLP(nn.Module):
    def __init__(self, d_in, width=96, depth=2, p_drop=0.2):
        super().__init__()
        blocks = []
        d = d_in
        for _ in range(depth):
            blocks.append(nn.Sequential(nn.Linear(d, width), nn.LayerNorm(width), nn.GELU(), nn.Dropout(p_drop)))
            d = width
        self.blocks = nn.ModuleList(blocks)
        self.out = nn.Linear(width, 1)

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.out(x).squeeze(-1)


def loss_fn(model, batch):
    x, y = batch
    return F.mse_loss(model(x), y)


def iterate_batches(X, y, batch_size, shuffle, gen=None):
    n = X.shape[0]
    order = torch.randperm(n, generator=gen) if shuffle else torch.arange(n)
    for i in range(0, n, batch_size):
        idx = order[i:i + batch_size]
        yield X[idx], y[idx]


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=MAX_LR, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.99))


def make_target():
    torch.manual_seed(SEED)
    X_tr, y_tr, X_va, y_va, _ = prepare()
    X_tr, y_tr = torch.from_numpy(X_tr), torch.from_numpy(y_tr)
    X_va, y_va = torch.from_numpy(X_va), torch.from_numpy(y_va)
    model = ReturnMLP(X_tr.shape[1])
    gen = torch.Generator().manual_seed(SEED)
    batches = list(iterate_batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, gen=gen))[:20]
    return {"model": model, "data": batches, "val_data": [(X_va, y_va)], "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


@torch.no_grad()
def evaluate(model, X, y):
    model.eval()
    pred = torch.cat([model(X[i:i + 8192]) for i in range(0, len(X), 8192)])
    model.train()
    mse = F.mse_loss(pred, y).item()
    r2 = 1.0 - mse / F.mse_loss(torch.full_like(y, float(y.mean())), y).item()
    ic = pd.Series(pred.numpy()).rank().corr(pd.Series(y.numpy()).rank())  # spearman rank IC
    return mse, r2, ic


if __name__ == "__main__":
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    t_start = time.time()
    X_tr, y_tr, X_va, y_va, (d0, dcut, d1) = prepare()
    print(f"[data] train {d0} -> {dcut} : {len(y_tr)} rows | val {dcut} -> {d1} : {len(y_va)} rows | {X_tr.shape[1]} features")
    X_tr, y_tr = torch.from_numpy(X_tr), torch.from_numpy(y_tr)
    X_va, y_va = torch.from_numpy(X_va), torch.from_numpy(y_va)

    model = ReturnMLP(X_tr.shape[1])
    print(f"[model] ReturnMLP params={sum(p.numel() for p in model.parameters()):,}", flush=True)
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(y_tr) / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=MAX_LR, total_steps=total_steps,
                                                    pct_start=0.15, anneal_strategy="cos")
    gen = torch.Generator().manual_seed(SEED)

    base_mse = F.mse_loss(torch.full_like(y_va, float(y_tr.mean())), y_va).item()
    mse0, _, _ = evaluate(model, X_va, y_va)
    print(f"step 0 | val_mse {mse0:.4f} | baseline(train-mean) val_mse {base_mse:.4f}")

    step = 0
    for epoch in range(EPOCHS):
        t0 = time.time()
        tot, n = 0.0, 0
        for batch in iterate_batches(X_tr, y_tr, BATCH_SIZE, shuffle=True, gen=gen):
            loss = loss_fn(model, batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            tot += loss.item() * len(batch[1])
            n += len(batch[1])
        if (epoch + 1) % EVAL_EVERY == 0:
            val_mse, val_r2, val_ic = evaluate(model, X_va, y_va)
            print(f"epoch {epoch + 1:2d} | step {step:5d} | train_mse {tot / n:.4f} | val_mse {val_mse:.4f} "
                  f"| val_r2 {val_r2:+.4f} | val_ic {val_ic:+.4f} | lr {scheduler.get_last_lr()[0]:.2e} "
                  f"| {1000 * (time.time() - t0):.0f}ms")

    val_mse, val_r2, val_ic = evaluate(model, X_va, y_va)
    print(f"done in {time.time() - t_start:.1f}s | final val_mse {val_mse:.4f} vs baseline {base_mse:.4f} "
          f"({100 * (1 - val_mse / base_mse):.2f}% lower) | R2 {val_r2:+.4f} | rank IC {val_ic:+.4f}")
