"""Sparse autoencoder for unmixing Raman-like spectra.

Each spectrum is a non-negative mixture of a few reference compounds plus a
sloped baseline and detector noise. The code layer is a ReLU layer with an L1
activity penalty so that each spectrum is explained by a handful of units;
the decoder is a single linear layer whose columns act as learned endmembers.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

N_BANDS = 128
N_COMPOUNDS = 24
CODE_DIM = 64
NOISE_STD = 0.01

args = dict(
    n_train=8000,
    n_eval=1000,
    per_device_train_batch_size=128,
    num_train_epochs=60,
    learning_rate=3e-3,
    warmup_ratio=0.05,
    weight_decay=0.0,
    l1_coef=3e-3,
    logging_steps=250,
    seed=42,
)


# ----------------------------------------------------------------------------
# data
# ----------------------------------------------------------------------------
def reference_spectra(rng):
    wn = np.linspace(0, 1, N_BANDS)
    refs = np.zeros((N_COMPOUNDS, N_BANDS))
    for k in range(N_COMPOUNDS):
        for _ in range(rng.integers(2, 5)):
            center = rng.uniform(0.05, 0.95)
            width = rng.uniform(0.008, 0.03)
            refs[k] += rng.uniform(0.3, 1.0) / (1 + ((wn - center) / width) ** 2)   # Lorentzian band
        refs[k] /= refs[k].max()
    return refs


def simulate_spectra(n, refs, rng):
    wn = np.linspace(0, 1, N_BANDS)
    X = np.zeros((n, N_BANDS))
    for i in range(n):
        k = rng.integers(1, 4)
        comps = rng.choice(N_COMPOUNDS, size=k, replace=False)
        abund = rng.gamma(2.0, 0.25, size=k)
        X[i] = abund @ refs[comps]
        X[i] += rng.uniform(0, 0.05) + rng.uniform(-0.03, 0.03) * wn    # fluorescence baseline
    X += rng.normal(0, NOISE_STD, X.shape)
    return X.astype(np.float32)


def build_datasets(a):
    rng = np.random.default_rng(a["seed"])
    refs = reference_spectra(rng)
    X = simulate_spectra(a["n_train"] + a["n_eval"], refs, rng)
    X = torch.from_numpy(X)
    return TensorDataset(X[: a["n_train"]]), TensorDataset(X[a["n_train"]:])


def make_loaders(a):
    train_ds, eval_ds = build_datasets(a)
    g = torch.Generator().manual_seed(a["seed"])
    train_dl = DataLoader(train_ds, batch_size=a["per_device_train_batch_size"], shuffle=True,
                          generator=g, drop_last=True)
    eval_dl = DataLoader(eval_ds, batch_size=500)
    return train_dl, eval_dl


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class SparseAutoencoder(nn.Module):
    def __init__(self, n_in=N_BANDS, hidden=128, code_dim=CODE_DIM):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, hidden), nn.GELU(),
            nn.Linear(hidden, code_dim), nn.ReLU(),
        )
        self.decoder = nn.Linear(code_dim, n_in)

    def forward(self, x):
        code = self.encoder(x)
        return self.decoder(code), code


def sae_loss(model, batch, l1_coef=args["l1_coef"]):
    (x,) = batch
    recon, code = model(x)
    mse = F.mse_loss(recon, x)
    l1 = code.abs().sum(1).mean()
    return mse + l1_coef * l1, mse, l1


def compute_loss(model, batch):
    return sae_loss(model, batch)[0]


def make_optimizer(params, a=args):
    return torch.optim.AdamW(params, lr=a["learning_rate"], weight_decay=a["weight_decay"])


def build_model(a=args):
    torch.manual_seed(a["seed"])
    return SparseAutoencoder()


@torch.no_grad()
def evaluate(model, dl):
    model.eval()
    sq, n, codes = 0.0, 0, []
    for (x,) in dl:
        recon, code = model(x)
        sq += ((recon - x) ** 2).sum().item()
        n += x.numel()
        codes.append(code)
    model.train()
    codes = torch.cat(codes)
    firing = (codes > 1e-6).float().mean(0)
    return {
        "eval_recon_mse": sq / n,
        "eval_active_units": int((firing > 0.01).sum()),
        "eval_mean_active_per_sample": round((codes > 1e-6).float().sum(1).mean().item(), 2),
    }


def make_target():
    train_dl, _ = make_loaders(args)
    batches = []
    for i, b in enumerate(train_dl):
        batches.append(b)
        if i == 4:
            break
    return {
        "model": build_model(args),
        "data": batches,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main(a=args):
    t0 = time.time()
    train_dl, eval_dl = make_loaders(a)
    model = build_model(a)
    optimizer = make_optimizer(model.parameters(), a)
    total = a["num_train_epochs"] * len(train_dl)
    warmup = int(a["warmup_ratio"] * total)

    def lr_lambda(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    print("***** Running training *****")
    print(f"  Num examples = {len(train_dl.dataset)}")
    print(f"  Num Epochs = {a['num_train_epochs']}")
    print(f"  Instantaneous batch size per device = {a['per_device_train_batch_size']}")
    print(f"  Total optimization steps = {total}")
    print(f"  Code units = {CODE_DIM}")
    step, acc = 0, {"loss": 0.0, "mse": 0.0, "l1": 0.0}
    for epoch in range(a["num_train_epochs"]):
        for batch in train_dl:
            loss, mse, l1 = sae_loss(model, batch, a["l1_coef"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            acc["loss"] += loss.item()
            acc["mse"] += mse.item()
            acc["l1"] += l1.item()
            if step % a["logging_steps"] == 0:
                k = a["logging_steps"]
                print({"loss": round(acc["loss"] / k, 5), "recon_mse": round(acc["mse"] / k, 6),
                       "code_l1": round(acc["l1"] / k, 4), "learning_rate": float(f"{scheduler.get_last_lr()[0]:.3e}"),
                       "epoch": round(step / len(train_dl), 2)})
                acc = {"loss": 0.0, "mse": 0.0, "l1": 0.0}
        if (epoch + 1) % 10 == 0:
            metrics = evaluate(model, eval_dl)
            metrics["epoch"] = float(epoch + 1)
            print(metrics)
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(step / runtime, 2),
           "epoch": float(a["num_train_epochs"])})


if __name__ == "__main__":
    main()
