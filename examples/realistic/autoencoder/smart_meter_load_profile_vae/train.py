"""Dense VAE over daily smart-meter load profiles (48 half-hour readings per day).

The latent space is used downstream for household segmentation, so the KL term
is annealed in linearly to avoid posterior collapse early in training.
"""
import math
import os
import time

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

ARGS = dict(
    n_households=450,
    days_per_household=12,
    latent_dim=16,
    hidden=128,
    per_device_train_batch_size=128,
    num_train_epochs=32,
    learning_rate=2e-3,
    warmup_ratio=0.0,
    kl_warmup_epochs=12,
    logging_steps=40,
    seed=42,
)
DATA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "load_profiles.csv")
SLOTS = 48


def synth_profiles(rng):
    hours = np.arange(SLOTS) / 2.0
    archetypes = ["commuter", "home_worker", "ev_night", "retired", "shift_worker"]
    rows = []
    for hh in range(ARGS["n_households"]):
        kind = archetypes[rng.integers(len(archetypes))]
        base = rng.uniform(0.08, 0.35)
        scale = rng.lognormal(0.0, 0.35)
        for d in range(ARGS["days_per_household"]):
            weekend = d % 7 in (5, 6)
            load = np.full(SLOTS, base)
            m_peak = rng.normal(7.5 if not weekend else 9.0, 0.5)
            e_peak = rng.normal(19.0, 0.7)
            load += 0.6 * np.exp(-0.5 * ((hours - m_peak) / 0.8) ** 2)
            load += 1.2 * np.exp(-0.5 * ((hours - e_peak) / 1.5) ** 2)
            if kind == "home_worker" or (weekend and kind == "commuter") or kind == "retired":
                load += rng.uniform(0.3, 0.6) * np.exp(-0.5 * ((hours - 13.0) / 2.5) ** 2)
            if kind == "ev_night" and rng.random() < 0.7:
                start = rng.integers(0, 6)
                load[start:start + 8] += rng.uniform(2.5, 3.5)
            if kind == "shift_worker":
                load = np.roll(load, rng.integers(12, 20))
            load = scale * load * rng.lognormal(0.0, 0.1, SLOTS)
            rows.append([hh, d, kind] + load.round(3).tolist())
    cols = ["household_id", "day", "archetype"] + [f"kwh_{i:02d}" for i in range(SLOTS)]
    return pd.DataFrame(rows, columns=cols)


def load_data():
    if not os.path.exists(DATA_PATH):
        synth_profiles(np.random.default_rng(ARGS["seed"])).to_csv(DATA_PATH, index=False)
    df = pd.read_csv(DATA_PATH)
    cols = [c for c in df.columns if c.startswith("kwh_")]
    eval_mask = (df["household_id"] % 10) == 0
    x = np.log1p(df[cols].to_numpy(np.float32))
    train, test = x[~eval_mask.to_numpy()], x[eval_mask.to_numpy()]
    mu, sd = train.mean(0), train.std(0) + 1e-6
    return (train - mu) / sd, (test - mu) / sd


class ProfileVAE(nn.Module):
    def __init__(self, d_in=SLOTS, hidden=128, latent_dim=8):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(d_in, hidden), nn.SiLU(),
            nn.Linear(hidden, hidden // 2), nn.SiLU(),
        )
        self.fc_mu = nn.Linear(hidden // 2, latent_dim)
        self.fc_logvar = nn.Linear(hidden // 2, latent_dim)
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, hidden // 2), nn.SiLU(),
            nn.Linear(hidden // 2, hidden), nn.SiLU(),
            nn.Linear(hidden, d_in),
        )

    def forward(self, x):
        h = self.encoder(x)
        mu, logvar = self.fc_mu(h), self.fc_logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar) if self.training else mu
        return self.decoder(z), mu, logvar


class KLWarmup:
    def __init__(self, warmup_steps):
        self.warmup_steps = max(1, warmup_steps)
        self.step = 0

    @property
    def beta(self):
        return min(1.0, self.step / self.warmup_steps)


def vae_terms(model, x):
    recon, mu, logvar = model(x)
    rec = 0.5 * ((recon - x) ** 2).sum(dim=1).mean()
    kl = (-0.5 * (1 + logvar - mu.pow(2) - logvar.exp()).sum(dim=1)).mean()
    return rec, kl


def make_target():
    torch.manual_seed(ARGS["seed"])
    train, test = load_data()
    train_dl = DataLoader(TensorDataset(torch.from_numpy(train)),
                          batch_size=ARGS["per_device_train_batch_size"], shuffle=True)
    eval_dl = DataLoader(TensorDataset(torch.from_numpy(test)), batch_size=512)
    model = ProfileVAE(SLOTS, ARGS["hidden"], ARGS["latent_dim"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=ARGS["learning_rate"], weight_decay=0.01)
    kl_sched = KLWarmup(ARGS["kl_warmup_epochs"] * len(train_dl))

    def loss_fn(model, batch):
        rec, kl = vae_terms(model, batch[0])
        return rec + kl_sched.beta * kl

    return dict(model=model, data=train_dl, val_data=eval_dl, loss_fn=loss_fn,
                optimizer=optimizer, kl_schedule=kl_sched, task="reconstruction")


@torch.no_grad()
def evaluate(model, eval_dl, beta, epoch):
    model.eval()
    rec_sum, kl_sum, n = 0.0, 0.0, 0
    for (x,) in eval_dl:
        rec, kl = vae_terms(model, x)
        rec_sum += rec.item() * len(x)
        kl_sum += kl.item() * len(x)
        n += len(x)
    model.train()
    rec, kl = rec_sum / n, kl_sum / n
    return {"eval_loss": round(rec + beta * kl, 4), "eval_recon": round(rec, 4),
            "eval_kl": round(kl, 4), "epoch": round(epoch, 2)}


def main():
    t = make_target()
    model, train_dl, eval_dl = t["model"], t["data"], t["val_data"]
    optimizer, loss_fn, kl_sched = t["optimizer"], t["loss_fn"], t["kl_schedule"]
    steps_per_epoch = len(train_dl)
    total_steps = ARGS["num_train_epochs"] * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 - s / total_steps)
    print(f"***** Running training *****\n  Num examples = {len(train_dl.dataset)}\n"
          f"  Num Epochs = {ARGS['num_train_epochs']}\n  Batch size = {ARGS['per_device_train_batch_size']}\n"
          f"  Total optimization steps = {total_steps}")
    start = time.time()
    acc_loss, acc_rec, acc_kl, acc_n, global_step, total_loss = 0.0, 0.0, 0.0, 0, 0, 0.0
    for epoch in range(ARGS["num_train_epochs"]):
        for (x,) in train_dl:
            rec, kl = vae_terms(model, x)
            loss = rec + kl_sched.beta * kl
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()
            sched.step()
            kl_sched.step += 1
            global_step += 1
            acc_loss += loss.item(); acc_rec += rec.item(); acc_kl += kl.item(); acc_n += 1
            total_loss += loss.item()
            if global_step % ARGS["logging_steps"] == 0:
                print({"loss": round(acc_loss / acc_n, 4), "recon": round(acc_rec / acc_n, 4),
                       "kl": round(acc_kl / acc_n, 4), "beta": round(kl_sched.beta, 3),
                       "learning_rate": float(f"{sched.get_last_lr()[0]:.4e}"),
                       "epoch": round(global_step / steps_per_epoch, 2)})
                acc_loss, acc_rec, acc_kl, acc_n = 0.0, 0.0, 0.0, 0
        print(evaluate(model, eval_dl, kl_sched.beta, global_step / steps_per_epoch))
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(len(train_dl.dataset) * ARGS["num_train_epochs"] / runtime, 1),
           "train_loss": round(total_loss / global_step, 4), "epoch": float(ARGS["num_train_epochs"])})


if __name__ == "__main__":
    main()
