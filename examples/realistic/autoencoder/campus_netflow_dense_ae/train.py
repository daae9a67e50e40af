"""Dense autoencoder for flow-level intrusion detection.

Flow records exported from the campus border collector. The autoencoder is fit on
benign traffic from the capture week (rows the IDS confirmed as attacks are dropped),
and flows are scored on the SOC-labelled holdout by reconstruction error.
"""
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

SEED = 1234
RUN_DIR = Path(__file__).resolve().parent
DATA_DIR = RUN_DIR / "data"

NUMERIC = ["duration_s", "bytes_out", "bytes_in", "pkts_out", "pkts_in", "syn_frac", "rst_frac", "mean_iat_ms"]
LOG_COLS = ["duration_s", "bytes_out", "bytes_in", "pkts_out", "pkts_in", "mean_iat_ms"]
PORT_BUCKETS = [22, 53, 80, 123, 443, 445, 3389]
PROTOS = ["tcp", "udp", "icmp"]

BATCH_SIZE = 256
EPOCHS = 40
LR = 1e-3
LATENT_DIM = 6

torch.set_num_threads(1)


# ----------------------------------------------------------------------------- synthetic export

def _benign(n, rng):
    kind = rng.choice(["https", "http", "dns", "ssh", "smb", "ntp"], size=n, p=[0.45, 0.12, 0.22, 0.05, 0.12, 0.04])
    hour = np.clip(rng.normal(13, 3.5, n), 0, 23.99)
    dur = rng.lognormal(1.0, 1.1, n)
    pkts_in = np.maximum(1, rng.lognormal(3.0, 1.0, n)).round()
    pkts_out = np.maximum(1, pkts_in * rng.uniform(0.4, 0.8, n)).round()
    bytes_in = pkts_in * rng.uniform(700, 1400, n)
    bytes_out = pkts_out * rng.uniform(80, 220, n)
    port = np.where(kind == "https", 443, np.where(kind == "http", 80, np.where(kind == "dns", 53,
                    np.where(kind == "ssh", 22, np.where(kind == "smb", 445, 123)))))
    proto = np.where(np.isin(kind, ["dns", "ntp"]), "udp", "tcp")
    small = np.isin(kind, ["dns", "ntp"])
    pkts_in[small], pkts_out[small] = 1, 1
    bytes_out[small] = rng.uniform(60, 90, small.sum())
    bytes_in[small] = rng.uniform(90, 320, small.sum())
    dur[small] = rng.uniform(0.005, 0.06, small.sum())
    ssh = kind == "ssh"
    dur[ssh] = rng.lognormal(5.0, 1.0, ssh.sum())
    bytes_out[ssh] = pkts_out[ssh] * rng.uniform(90, 160, ssh.sum())
    bytes_in[ssh] = pkts_in[ssh] * rng.uniform(90, 200, ssh.sum())
    tcp = proto == "tcp"
    syn = np.where(tcp, 1.0 / (pkts_out + pkts_in), 0.0)
    rst = np.where(tcp, rng.binomial(1, 0.03, n) / (pkts_out + pkts_in), 0.0)
    iat = dur * 1000 / (pkts_out + pkts_in)
    return pd.DataFrame({"duration_s": dur, "bytes_out": bytes_out, "bytes_in": bytes_in, "pkts_out": pkts_out,
                         "pkts_in": pkts_in, "syn_frac": syn, "rst_frac": rst, "mean_iat_ms": iat,
                         "dst_port": port, "proto": proto, "hour": hour})


def _attacks(n, rng):
    kind = rng.choice(["synflood", "portscan", "bruteforce", "exfil"], size=n, p=[0.35, 0.3, 0.2, 0.15])
    df = pd.DataFrame({
        "duration_s": rng.uniform(0.0005, 0.01, n), "bytes_out": rng.uniform(40, 120, n),
        "bytes_in": np.zeros(n), "pkts_out": rng.integers(1, 4, n).astype(float), "pkts_in": np.zeros(n),
        "syn_frac": np.ones(n), "rst_frac": np.zeros(n), "mean_iat_ms": rng.uniform(0.05, 0.5, n),
        "dst_port": rng.choice([80, 443], n), "proto": "tcp", "hour": rng.uniform(0, 24, n),
    })
    ps = kind == "portscan"
    df.loc[ps, "dst_port"] = rng.integers(1024, 65535, ps.sum())
    df.loc[ps, "pkts_in"] = 1.0
    df.loc[ps, "bytes_in"] = rng.uniform(40, 60, ps.sum())
    df.loc[ps, "syn_frac"] = 0.5
    df.loc[ps, "rst_frac"] = rng.uniform(0.4, 0.5, ps.sum())
    bf = kind == "bruteforce"
    df.loc[bf, "dst_port"] = 22
    df.loc[bf, "duration_s"] = rng.uniform(1.5, 5.0, bf.sum())
    df.loc[bf, "pkts_out"] = rng.integers(14, 24, bf.sum()).astype(float)
    df.loc[bf, "pkts_in"] = rng.integers(12, 22, bf.sum()).astype(float)
    df.loc[bf, "bytes_out"] = rng.uniform(2200, 3200, bf.sum())
    df.loc[bf, "bytes_in"] = rng.uniform(3000, 4200, bf.sum())
    df.loc[bf, "syn_frac"] = 1.0 / (df.loc[bf, "pkts_out"] + df.loc[bf, "pkts_in"])
    df.loc[bf, "mean_iat_ms"] = df.loc[bf, "duration_s"] * 1000 / (df.loc[bf, "pkts_out"] + df.loc[bf, "pkts_in"])
    df.loc[bf, "hour"] = rng.uniform(0, 6, bf.sum())
    ex = kind == "exfil"
    df.loc[ex, "dst_port"] = 443
    df.loc[ex, "duration_s"] = rng.uniform(60, 400, ex.sum())
    df.loc[ex, "pkts_out"] = rng.integers(2000, 6000, ex.sum()).astype(float)
    df.loc[ex, "pkts_in"] = df.loc[ex, "pkts_out"] * rng.uniform(0.3, 0.5, ex.sum())
    df.loc[ex, "bytes_out"] = df.loc[ex, "pkts_out"] * rng.uniform(1200, 1450, ex.sum())
    df.loc[ex, "bytes_in"] = df.loc[ex, "pkts_in"] * rng.uniform(60, 80, ex.sum())
    df.loc[ex, "syn_frac"] = 1.0 / (df.loc[ex, "pkts_out"] + df.loc[ex, "pkts_in"])
    df.loc[ex, "mean_iat_ms"] = df.loc[ex, "duration_s"] * 1000 / (df.loc[ex, "pkts_out"] + df.loc[ex, "pkts_in"])
    df.loc[ex, "hour"] = rng.uniform(1, 5, ex.sum())
    return df


def write_exports():
    DATA_DIR.mkdir(exist_ok=True)
    capture_csv, holdout_csv = DATA_DIR / "flows_capture_wk14.csv", DATA_DIR / "flows_holdout_soc.csv"
    if capture_csv.exists() and holdout_csv.exists():
        return capture_csv, holdout_csv
    rng = np.random.default_rng(SEED)

    def block(n_benign, n_attack):
        df = pd.concat([_benign(n_benign, rng).assign(is_attack=0), _attacks(n_attack, rng).assign(is_attack=1)])
        return df.sample(frac=1.0, random_state=int(rng.integers(1 << 30))).reset_index(drop=True)

    cap = block(26_000, 4_000)
    cap["is_attack"] = cap["is_attack"].astype(object)
    unscored = rng.random(len(cap)) < 0.04  # IDS rule engine timed out on these flows
    cap.loc[unscored, "is_attack"] = "?"
    cap.round(4).to_csv(capture_csv, index=False)
    block(8_000, 1_200).round(4).to_csv(holdout_csv, index=False)
    return capture_csv, holdout_csv


# ----------------------------------------------------------------------------- features

def featurize(df):
    out = pd.DataFrame(index=df.index)
    for c in NUMERIC:
        out[c] = np.log1p(df[c]) if c in LOG_COLS else df[c]
    out["bytes_ratio"] = np.log1p(df["bytes_out"]) - np.log1p(df["bytes_in"])
    out["hour_sin"] = np.sin(2 * np.pi * df["hour"] / 24)
    out["hour_cos"] = np.cos(2 * np.pi * df["hour"] / 24)
    port = df["dst_port"].where(df["dst_port"].isin(PORT_BUCKETS), -1)
    for p in PORT_BUCKETS + [-1]:
        out[f"port_{p if p > 0 else 'other'}"] = (port == p).astype(float)
    for p in PROTOS:
        out[f"proto_{p}"] = (df["proto"] == p).astype(float)
    return out.to_numpy(np.float32)


def build_data():
    capture_csv, holdout_csv = write_exports()
    capture = pd.read_csv(capture_csv)
    holdout = pd.read_csv(holdout_csv)

    benign = capture[capture["is_attack"] != 1].reset_index(drop=True)
    X = featurize(benign)
    rng = np.random.default_rng(SEED)
    perm = rng.permutation(len(X))
    n_val = int(0.1 * len(X))
    X_val, X_train = X[perm[:n_val]], X[perm[n_val:]]

    mu, sd = X_train.mean(0), X_train.std(0) + 1e-6
    X_train, X_val = (X_train - mu) / sd, (X_val - mu) / sd
    X_test = (featurize(holdout) - mu) / sd
    y_test = holdout["is_attack"].to_numpy().astype(np.int64)

    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(X_train)), batch_size=BATCH_SIZE, shuffle=True,
                              generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(X_val)), batch_size=1024)
    test = (torch.from_numpy(X_test.astype(np.float32)), torch.from_numpy(y_test))
    return train_loader, val_loader, test


# ----------------------------------------------------------------------------- model

class FlowAutoencoder(nn.Module):
    def __init__(self, n_features, latent_dim=LATENT_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_features, 64), nn.ReLU(),
            nn.Linear(64, 32), nn.ReLU(),
            nn.Linear(32, latent_dim),
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent_dim, 32), nn.ReLU(),
            nn.Linear(32, 64), nn.ReLU(),
            nn.Linear(64, n_features),
        )

    def forward(self, x):
        return self.decoder(self.encoder(x))


def mse_loss(model, batch):
    x = batch[0]
    return nn.functional.mse_loss(model(x), x)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def roc_auc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels == 1
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def average_precision(scores, labels):
    order = np.argsort(-scores)
    y = labels[order]
    tp = np.cumsum(y)
    precision = tp / np.arange(1, len(y) + 1)
    return (precision * y).sum() / y.sum()


@torch.no_grad()
def evaluate(model, val_loader, test):
    model.eval()
    tot, n = 0.0, 0
    for (x,) in val_loader:
        tot += nn.functional.mse_loss(model(x), x, reduction="sum").item() / x.size(1)
        n += x.size(0)
    x_test, y_test = test
    scores = ((model(x_test) - x_test) ** 2).mean(1).numpy()
    model.train()
    y = y_test.numpy()
    return tot / n, roc_auc(scores, y), average_precision(scores, y)


def make_target():
    torch.manual_seed(SEED)
    train_loader, val_loader, test = build_data()
    model = FlowAutoencoder(train_loader.dataset.tensors[0].shape[1])
    return {
        "model": model,
        "data": train_loader,
        "loss_fn": mse_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "task": "reconstruction",
        "val_data": val_loader,
        "test_data": test,
    }


if __name__ == "__main__":
    t0 = time.time()
    target = make_target()
    model, train_loader, loss_fn, optimizer = target["model"], target["data"], target["loss_fn"], target["optimizer"]
    val_loader, test = target["val_data"], target["test_data"]
    n_steps = len(train_loader)
    print(f"train flows: {len(train_loader.dataset)}  val flows: {len(val_loader.dataset)}  "
          f"holdout flows: {len(test[1])}  features: {train_loader.dataset.tensors[0].shape[1]}")
    for epoch in range(1, EPOCHS + 1):
        ep_start = time.time()
        running = 0.0
        for batch in train_loader:
            loss = loss_fn(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.item()
        val_loss, auc, ap = evaluate(model, val_loader, test)
        dt = time.time() - ep_start
        print(f"Epoch {epoch}/{EPOCHS}")
        print(f"{n_steps}/{n_steps} - {int(round(dt))}s - {dt / n_steps * 1000:.0f}ms/step - "
              f"loss: {running / n_steps:.4f} - val_loss: {val_loss:.4f} - val_auroc: {auc:.4f} - val_auprc: {ap:.4f}")
    val_loss, auc, ap = evaluate(model, val_loader, test)
    print(f"holdout AUROC: {auc:.4f}  AUPRC: {ap:.4f}  benign val recon MSE: {val_loss:.4f}")
    print(f"wall time: {time.time() - t0:.1f}s")
