"""Denoising autoencoder for building HVAC telemetry.

Each row is one 15-minute snapshot of 20 correlated readings (supply/return air
temperatures, damper positions, fan speeds, CO2, ...). Inputs are corrupted with
Gaussian jitter plus random feature dropout (sensor dropouts) and the network
reconstructs the clean row. The bottleneck codes are later used for anomaly
scoring, so we track the clean reconstruction error on a held-out week.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 3
N_FEAT = 20
CODE = 6

config = {
    "batch_size": 256,
    "max_epochs": 40,
    "lr": 2e-3,
    "weight_decay": 1e-5,
    "input_noise": 0.1,
    "mask_prob": 0.15,
}


def hvac_table(n, seed):
    """Rows driven by a few hidden factors: outdoor temp, occupancy, time of day, setpoint."""
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, 24, n)
    outdoor = 12 + 10 * np.sin((t - 9) / 24 * 2 * np.pi) + rng.normal(0, 2, n)
    occ = np.clip(np.sin((t - 7) / 12 * np.pi), 0, None) * rng.uniform(0.3, 1.0, n)
    setpoint = rng.choice([20.0, 21.0, 22.0], n)
    load = (outdoor - setpoint) * 0.08 + occ * 0.6
    cols = [
        outdoor, setpoint, occ * 900 + 420,
        setpoint - 6 * np.tanh(load), setpoint + 1.5 * np.tanh(load) + 0.5 * occ,
        50 + 40 * np.tanh(np.abs(load)), 30 + 60 * occ, 100 - 30 * np.tanh(load),
        np.sin(t / 24 * 2 * np.pi), np.cos(t / 24 * 2 * np.pi),
    ]
    base = np.stack(cols, 1)
    mix = np.random.default_rng(99).normal(0, 0.4, (base.shape[1], N_FEAT - base.shape[1]))
    z = (base - base.mean(0)) / base.std(0)
    extra = np.tanh(z @ mix)
    x = np.concatenate([z, extra], 1)
    x = x + rng.normal(0, 0.03, x.shape)
    return x.astype(np.float32)


class HVACData:
    def __init__(self, batch_size):
        tr = hvac_table(8000, seed=10)
        va = hvac_table(1500, seed=11)
        mu, sd = tr.mean(0), tr.std(0)
        self.train = torch.from_numpy((tr - mu) / sd)
        self.val = torch.from_numpy((va - mu) / sd)
        self.bs = batch_size
        self.gen = torch.Generator().manual_seed(SEED)

    def train_dataloader(self):
        perm = torch.randperm(len(self.train), generator=self.gen)
        return [self.train[perm[i:i + self.bs]] for i in range(0, len(perm), self.bs)]

    def val_dataloader(self):
        return list(torch.split(self.val, 500))


def corrupt(x, noise, p, gen=None):
    keep = (torch.rand(x.shape, generator=gen) > p).float()
    return (x + noise * torch.randn(x.shape, generator=gen)) * keep


class DenoisingAE(nn.Module):
    def __init__(self, d=N_FEAT, code=CODE):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, 32), nn.GELU(), nn.Linear(32, code))
        self.dec = nn.Sequential(nn.Linear(code, 32), nn.GELU(), nn.Linear(32, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, x):
        return self.dec(self.enc(x))


_noise_gen = torch.Generator().manual_seed(SEED + 1)


def training_loss(model, batch):
    noisy = corrupt(batch, config["input_noise"], config["mask_prob"], _noise_gen)
    return F.mse_loss(model(noisy), batch)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=config["lr"], weight_decay=config["weight_decay"])


def fmt_bar(epoch, n, secs, **metrics):
    m = ", ".join(f"{k}={v:.4f}" for k, v in metrics.items())
    return (f"Epoch {epoch}: 100%|\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588\u2588| {n}/{n} "
            f"[00:{secs:02.0f}<00:00, {n / max(secs, 1e-9):.2f}it/s, v_num=3, {m}]")


def make_target():
    torch.manual_seed(SEED)
    dm = HVACData(config["batch_size"])
    model = DenoisingAE()
    data = dm.train_dataloader()[:3]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": training_loss,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "task": "regression"}


def main():
    torch.manual_seed(SEED)
    print(f"Seed set to {SEED}")
    dm = HVACData(config["batch_size"])
    model = DenoisingAE()
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=3)
    print("GPU available: False, used: False")
    print(f"  | Name  | Type       | Params\n---------------------------------------\n"
          f"0 | model | DenoisingAE | {sum(p.numel() for p in model.parameters()) / 1e3:.1f} K")
    best = float("inf")
    for epoch in range(config["max_epochs"]):
        t0 = time.time()
        model.train()
        loader = dm.train_dataloader()
        run = 0.0
        for batch in loader:
            loss = training_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run += loss.item() * len(batch)
        train_loss = run / len(dm.train)
        model.eval()
        with torch.no_grad():
            val_loss = sum(F.mse_loss(model(b), b, reduction="sum").item()
                           for b in dm.val_dataloader()) / dm.val.numel()
        sched.step(val_loss)
        print(fmt_bar(epoch, len(loader), time.time() - t0, train_loss=train_loss, val_loss=val_loss))
        if val_loss < best:
            best = val_loss
    print(f"`Trainer.fit` stopped: `max_epochs={config['max_epochs']}` reached.")
    print(f"best val_loss={best:.4f}  lr={opt.param_groups[0]['lr']:.2e}")


if __name__ == "__main__":
    main()
