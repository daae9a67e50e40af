"""Heteroscedastic autoencoder for wind-turbine SCADA snapshots.

The decoder predicts a mean and a log-variance per channel so that the
reconstruction NLL can be used as a per-channel anomaly score later on
(high NLL under a confident variance = suspicious reading).

Data: synthetic 10-minute SCADA snapshots written to a CSV in a temp dir
and read back, mimicking the export we get from the site historian.
"""
import argparse
import csv
import math
import os
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn

CHANNELS = [
    "wind_speed", "rotor_rpm", "gen_rpm", "power_kw", "pitch_a", "pitch_b",
    "pitch_c", "nacelle_temp", "gearbox_oil_temp", "gen_bearing_temp",
    "ambient_temp", "yaw_error", "tower_acc_x", "tower_acc_y", "grid_freq",
    "reactive_kvar", "hydraulic_press", "converter_temp", "blade_load_a",
    "blade_load_b", "blade_load_c", "mainshaft_temp", "cabinet_humidity",
    "ice_detector",
]


def get_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=6144)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=40)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--latent", type=int, default=6)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log_every", type=int, default=1)
    return p.parse_args(argv)


def write_scada_csv(path, rows, seed):
    rng = np.random.default_rng(seed)
    wind = rng.weibull(2.0, rows) * 8.0
    amb = rng.normal(8.0, 6.0, rows)
    rpm = np.clip(wind * 1.6, 0, 16) + rng.normal(0, 0.2, rows)
    power = np.clip((wind - 3.0) ** 3 * 4.0, 0, 2300) + rng.normal(0, 15, rows)
    pitch = np.where(wind > 12, (wind - 12) * 2.5, 0.5) + rng.normal(0, 0.3, (3, rows))
    cols = {
        "wind_speed": wind,
        "rotor_rpm": rpm,
        "gen_rpm": rpm * 95.0 + rng.normal(0, 8, rows),
        "power_kw": power,
        "pitch_a": pitch[0], "pitch_b": pitch[1], "pitch_c": pitch[2],
        "nacelle_temp": amb + 12 + power / 300 + rng.normal(0, 1, rows),
        "gearbox_oil_temp": amb + 30 + power / 120 + rng.normal(0, 1.5, rows),
        "gen_bearing_temp": amb + 25 + power / 150 + rng.normal(0, 1.5, rows),
        "ambient_temp": amb,
        "yaw_error": rng.normal(0, 4, rows),
        "tower_acc_x": 0.02 * wind + rng.normal(0, 0.05, rows),
        "tower_acc_y": 0.015 * wind + rng.normal(0, 0.05, rows),
        "grid_freq": 50 + rng.normal(0, 0.02, rows),
        "reactive_kvar": 0.2 * power + rng.normal(0, 20, rows),
        "hydraulic_press": 180 + 0.5 * pitch.mean(0) + rng.normal(0, 2, rows),
        "converter_temp": amb + 20 + power / 100 + rng.normal(0, 2, rows),
        "blade_load_a": wind ** 2 * 3 + rng.normal(0, 20, (rows,)),
        "blade_load_b": wind ** 2 * 3 + rng.normal(0, 20, (rows,)),
        "blade_load_c": wind ** 2 * 3 + rng.normal(0, 20, (rows,)),
        "mainshaft_temp": amb + 18 + power / 200 + rng.normal(0, 1, rows),
        # humidity sensor is pegged at its upper range on this site
        "cabinet_humidity": np.full(rows, 100.0),
        # ice detector only reports 0 outside of winter
        "ice_detector": np.zeros(rows),
    }
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["timestamp"] + CHANNELS)
        for i in range(rows):
            w.writerow([i * 600] + [f"{cols[c][i]:.4f}" for c in CHANNELS])


def load_scada(path):
    with open(path) as f:
        r = csv.DictReader(f)
        data = [[float(row[c]) for c in CHANNELS] for row in r]
    return np.asarray(data, dtype=np.float32)


def build_data(args):
    tmp = tempfile.mkdtemp(prefix="scada_")
    path = os.path.join(tmp, "site07_export.csv")
    write_scada_csv(path, args.rows, args.seed)
    x = load_scada(path)
    n_val = len(x) // 8
    train, val = x[n_val:], x[:n_val]
    # min-max scale to [0, 1] with the train-split ranges, as the scorer expects
    lo = train.min(0)
    hi = train.max(0)
    scale = hi - lo + 1e-6
    train = np.clip((train - lo) / scale, 0.0, 1.0)
    val = np.clip((val - lo) / scale, 0.0, 1.0)
    return torch.from_numpy(train), torch.from_numpy(val)


class HeteroAE(nn.Module):
    def __init__(self, d_in, hidden, latent):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(d_in, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, latent),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden), nn.ReLU(),
        )
        # scaled readings are non-negative, so keep the mean non-negative too
        self.mu_head = nn.Sequential(nn.Linear(hidden, d_in), nn.ReLU())
        self.logvar_head = nn.Linear(hidden, d_in)

    def forward(self, x):
        z = self.encoder(x)
        h = self.decoder(z)
        mu = self.mu_head(h)
        logvar = self.logvar_head(h).clamp(min=-7.0, max=7.0)
        return mu, logvar


def gaussian_nll(x, mu, logvar):
    nll = 0.5 * logvar + (x - mu) ** 2 / (2 * torch.exp(logvar))
    return nll.sum(dim=1).mean()


def loss_fn(model, batch):
    mu, logvar = model(batch)
    return gaussian_nll(batch, mu, logvar)


def batches(x, batch_size, gen=None, shuffle=True):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), batch_size):
        yield x[idx[i:i + batch_size]]


@torch.no_grad()
def evaluate(model, val, batch_size):
    model.eval()
    tot_nll, tot_mse, n = 0.0, 0.0, 0
    for xb in batches(val, batch_size, shuffle=False):
        mu, logvar = model(xb)
        tot_nll += gaussian_nll(xb, mu, logvar).item() * len(xb)
        tot_mse += ((xb - mu) ** 2).mean().item() * len(xb)
        n += len(xb)
    model.train()
    return tot_nll / n, tot_mse / n


def make_target():
    args = get_args([])
    torch.manual_seed(args.seed)
    train, _ = build_data(args)
    model = HeteroAE(train.shape[1], args.hidden, args.latent)
    data = [train[i * args.batch_size:(i + 1) * args.batch_size] for i in range(4)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": lambda params: torch.optim.Adam(params, lr=args.lr),
        "task": "regression",
    }


def main():
    args = get_args()
    torch.manual_seed(args.seed)
    train, val = build_data(args)
    print(f"loaded {len(train)} train / {len(val)} val snapshots, {train.shape[1]} channels")

    model = HeteroAE(train.shape[1], args.hidden, args.latent)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: HeteroAE  params={n_params/1e3:.1f}k  latent={args.latent}")
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed)

    step = 0
    t0 = time.time()
    for epoch in range(1, args.epochs + 1):
        run_loss, nb = 0.0, 0
        for xb in batches(train, args.batch_size, gen):
            loss = loss_fn(model, xb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            run_loss += loss.item()
            nb += 1
            step += 1
        if epoch % args.log_every == 0:
            val_nll, val_mse = evaluate(model, val, args.batch_size)
            with torch.no_grad():
                _, lv = model(val[:512])
                min_lv = lv.min().item()
            print(f"epoch {epoch:3d} | step {step:5d} | train_nll {run_loss/nb:10.4f} | "
                  f"val_nll {val_nll:10.4f} | val_mse {val_mse:.4f} | min_logvar {min_lv:8.2f} | "
                  f"{time.time()-t0:5.1f}s")

    torch.save(model.state_dict(), os.path.join(tempfile.gettempdir(), "scada_hetero_ae.pt"))
    print("done.")


if __name__ == "__main__":
    main()
