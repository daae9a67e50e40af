"""Customer churn classifier: MLP on tabular features.

Effective batch of 256 rows built from 4 micro-batches of 64 (the box this
runs on in production is memory-bound), bf16 autocast on CPU, AdamW with
linear warmup + cosine decay.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- config
SEED = 1234
N_TRAIN = 12000
N_VAL = 3000
N_NUM = 14          # numeric features
N_PLANS = 6         # categorical: subscription plan
N_REGIONS = 9       # categorical: region
MICRO_BS = 64
ACCUM_STEPS = 4
EPOCHS = 8
LR = 2e-3
WEIGHT_DECAY = 0.01
WARMUP_STEPS = 30
LOG_EVERY = 25

torch.set_num_threads(1)


# ---------------------------------------------------------------- data
def generate_churn_data(n, seed):
    rng = np.random.default_rng(seed)
    tenure = rng.gamma(2.0, 12.0, size=n)                    # months
    monthly = rng.normal(55.0, 18.0, size=n).clip(10, None)
    support_calls = rng.poisson(1.5, size=n).astype(np.float64)
    usage = rng.lognormal(3.0, 0.6, size=n)
    other = rng.normal(size=(n, N_NUM - 4))
    plan = rng.integers(0, N_PLANS, size=n)
    region = rng.integers(0, N_REGIONS, size=n)

    plan_eff = np.array([0.8, 0.3, 0.0, -0.4, -0.9, 0.5])
    region_eff = rng.normal(0, 0.4, size=N_REGIONS)
    logit = 2.0 * (
        -0.06 * tenure
        + 0.035 * (monthly - 55)
        + 0.55 * support_calls
        - 0.5 * np.log(usage)
        + 0.8 * other[:, 0] * other[:, 1]
        + 0.6 * np.sin(2 * other[:, 2])
        - 0.4 * other[:, 3] ** 2
        + plan_eff[plan]
        + region_eff[region]
        + 2.0
    )
    p = 1 / (1 + np.exp(-logit))
    y = (rng.random(n) < p).astype(np.int64)
    num = np.column_stack([tenure, monthly, support_calls, usage, other]).astype(np.float32)
    return num, plan, region, y


def build_datasets():
    num, plan, region, y = generate_churn_data(N_TRAIN + N_VAL, SEED)
    tr = slice(0, N_TRAIN)
    va = slice(N_TRAIN, N_TRAIN + N_VAL)
    mean = num[tr].mean(0, keepdims=True)
    std = num[tr].std(0, keepdims=True) + 1e-6
    num = (num - mean) / std

    def pack(s):
        return (
            torch.from_numpy(num[s]),
            torch.from_numpy(plan[s]).long(),
            torch.from_numpy(region[s]).long(),
            torch.from_numpy(y[s]).long(),
        )

    return pack(tr), pack(va)


def iterate_batches(ds, batch_size, shuffle, generator=None):
    n = ds[0].shape[0]
    idx = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    for i in range(0, n - batch_size + 1 if shuffle else n, batch_size):
        j = idx[i:i + batch_size]
        yield tuple(t[j] for t in ds)


# ---------------------------------------------------------------- model
class ChurnMLP(nn.Module):
    def __init__(self, n_num=N_NUM, hidden=256, dropout=0.1):
        super().__init__()
        self.plan_emb = nn.Embedding(N_PLANS, 8)
        self.region_emb = nn.Embedding(N_REGIONS, 8)
        d_in = n_num + 16
        self.net = nn.Sequential(
            nn.Linear(d_in, hidden), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden), nn.GELU(), nn.Dropout(dropout),
            nn.Linear(hidden, hidden // 2), nn.GELU(),
            nn.Linear(hidden // 2, 2),
        )

    def forward(self, num, plan, region):
        x = torch.cat([num, self.plan_emb(plan), self.region_emb(region)], dim=-1)
        return self.net(x)


def compute_loss(model, batch):
    num, plan, region, y = batch
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        logits = model(num, plan, region)
        loss = F.cross_entropy(logits.float(), y)
    return loss


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY, betas=(0.9, 0.99))


def lr_at(step, total):
    if step < WARMUP_STEPS:
        return LR * (step + 1) / WARMUP_STEPS
    progress = (step - WARMUP_STEPS) / max(1, total - WARMUP_STEPS)
    return LR * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * progress)))


@torch.no_grad()
def evaluate(model, ds):
    model.eval()
    tot_loss, correct, n = 0.0, 0, 0
    for batch in iterate_batches(ds, 512, shuffle=False):
        num, plan, region, y = batch
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            logits = model(num, plan, region).float()
        tot_loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += y.numel()
    model.train()
    return tot_loss / n, correct / n


def make_target():
    torch.manual_seed(SEED)
    train_ds, _ = build_datasets()
    g = torch.Generator().manual_seed(SEED)
    it = iterate_batches(train_ds, MICRO_BS, shuffle=True, generator=g)
    data = [next(it) for _ in range(ACCUM_STEPS * 2)]
    return {
        "model": ChurnMLP(),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


# ---------------------------------------------------------------- train
def main():
    torch.manual_seed(SEED)
    train_ds, val_ds = build_datasets()
    model = ChurnMLP()
    optimizer = make_optimizer(model.parameters())
    g = torch.Generator().manual_seed(SEED)

    micro_per_epoch = N_TRAIN // MICRO_BS
    steps_per_epoch = micro_per_epoch // ACCUM_STEPS
    total_steps = steps_per_epoch * EPOCHS
    print(f"train rows={N_TRAIN} val rows={N_VAL} churn rate={train_ds[3].float().mean():.3f}")
    print(f"micro_bs={MICRO_BS} accum={ACCUM_STEPS} effective_bs={MICRO_BS * ACCUM_STEPS} "
          f"steps/epoch={steps_per_epoch} total_steps={total_steps}")
    print(f"params: {sum(p.numel() for p in model.parameters()):,}")

    step = 0
    t0 = time.time()
    model.train()
    for epoch in range(EPOCHS):
        running, running_n = 0.0, 0
        micro = 0
        for batch in iterate_batches(train_ds, MICRO_BS, shuffle=True, generator=g):
            loss = compute_loss(model, batch)
            (loss / ACCUM_STEPS).backward()
            running += loss.item()
            running_n += 1
            micro += 1
            if micro % ACCUM_STEPS != 0:
                continue

            lr = lr_at(step, total_steps)
            for pg in optimizer.param_groups:
                pg["lr"] = lr
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1

            if step % LOG_EVERY == 0:
                dt = (time.time() - t0) * 1000 / LOG_EVERY
                print(f"epoch {epoch} step {step:4d} | loss {running / running_n:.4f} | "
                      f"grad_norm {grad_norm:.3f} | lr {lr:.2e} | {dt:.1f}ms/step")
                running, running_n = 0.0, 0
                t0 = time.time()

        val_loss, val_acc = evaluate(model, val_ds)
        print(f"=== epoch {epoch} done | val_loss {val_loss:.4f} | val_acc {val_acc:.4f}")


if __name__ == "__main__":
    main()
