"""Heteroscedastic dense autoencoder for process-plant sensor snapshots.

The decoder predicts a mean and a variance per sensor, trained with a
Gaussian negative log-likelihood. At inference the per-sensor NLL is the
anomaly score, so precise sensors are weighted more than noisy ones.
"""
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.set_num_threads(1)

SEED = 2024
N_SENSORS = 12
N_FACTORS = 3
BATCH_SIZE = 128
EPOCHS = 25
LR = 1e-3
MIN_VAR = 1e-4

SENSOR_NAMES = [
    "feed_flow", "feed_temp", "reactor_p", "reactor_t", "jacket_t_in", "jacket_t_out",
    "stripper_p", "stripper_level", "steam_flow", "compressor_kw", "purge_rate", "product_flow",
]


def sample_plant(n, rng, n_faults=0):
    """Snapshots driven by a few latent operating factors (throughput, temperature
    setpoint, pressure setpoint) through a fixed nonlinear plant map."""
    mix = np.random.default_rng(0)  # the plant itself does not change between calls
    W1 = mix.normal(0, 1, size=(N_FACTORS, N_SENSORS))
    W2 = mix.normal(0, 0.5, size=(N_FACTORS, N_SENSORS))
    offsets = mix.uniform(-1, 1, size=N_SENSORS)
    scales = np.array([40.0, 2.0, 15.0, 3.0, 1.5, 1.5, 8.0, 0.5, 20.0, 120.0, 0.2, 35.0])
    base = np.array([500, 45, 2700, 120, 35, 40, 3300, 50, 230, 3400, 0.3, 420.0])
    # instrument noise differs a lot between sensors (relative to their spread)
    rel_noise = np.array([0.02, 0.05, 0.01, 0.03, 0.15, 0.15, 0.02, 0.30, 0.05, 0.08, 0.40, 0.02])

    f = rng.normal(0, 1, size=(n, N_FACTORS))
    clean = np.tanh(f @ W1 * 0.7) + (f @ W2) ** 2 * 0.3 + offsets
    clean = clean * scales + base
    noisy = clean + rng.normal(0, 1, size=clean.shape) * rel_noise * scales * 2.0
    is_fault = np.zeros(n, dtype=bool)
    if n_faults:
        idx = rng.choice(n, n_faults, replace=False)
        for i in idx:
            s = rng.integers(N_SENSORS)
            noisy[i, s] += rng.choice([-1, 1]) * rng.uniform(0.6, 1.5) * scales[s]
        is_fault[idx] = True
    return noisy.astype(np.float32), is_fault


def build_data():
    rng = np.random.default_rng(SEED)
    X_train, _ = sample_plant(6000, rng)
    X_val, _ = sample_plant(1500, rng)
    X_test, y_test = sample_plant(2000, rng, n_faults=100)
    mean, std = X_train.mean(0), X_train.std(0)
    norm = lambda a: torch.from_numpy((a - mean) / std)
    return norm(X_train), norm(X_val), norm(X_test), torch.from_numpy(y_test)


def build_loaders():
    X_train, X_val, X_test, y_test = build_data()
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(TensorDataset(X_train), batch_size=BATCH_SIZE, shuffle=True, generator=g)
    val_loader = DataLoader(TensorDataset(X_val), batch_size=512)
    return train_loader, val_loader, (X_test, y_test)


class HeteroscedasticAE(nn.Module):
    def __init__(self, d=N_SENSORS, hidden=64, code=4):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(d, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, code),
        )
        self.decoder = nn.Sequential(
            nn.Linear(code, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, hidden), nn.ReLU(),
        )
        self.mean_head = nn.Linear(hidden, d)
        self.var_head = nn.Linear(hidden, d)

    def forward(self, x):
        h = self.decoder(self.encoder(x))
        mean = self.mean_head(h)
        var = F.softplus(self.var_head(h)) + MIN_VAR
        return mean, var


gaussian_nll = nn.GaussianNLLLoss(reduction="mean")


def nll_loss(model, batch):
    (x,) = batch
    mean, var = model(x)
    return gaussian_nll(mean, x, var)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    nll, mse, n = 0.0, 0.0, 0
    for (x,) in loader:
        mean, var = model(x)
        nll += gaussian_nll(mean, x, var).item() * x.shape[0]
        mse += F.mse_loss(mean, x).item() * x.shape[0]
        n += x.shape[0]
    model.train()
    return nll / n, mse / n


def auroc(scores, labels):
    order = np.argsort(scores)
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    pos = labels.astype(bool)
    n_pos, n_neg = pos.sum(), (~pos).sum()
    return (ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


@torch.no_grad()
def anomaly_auroc(model, X, y):
    model.eval()
    mean, var = model(X)
    score = (0.5 * (torch.log(var) + (X - mean) ** 2 / var)).sum(1)
    model.train()
    return auroc(score.numpy(), y.numpy())


def make_target():
    torch.manual_seed(SEED)
    train_loader, _, _ = build_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        if i == 6:
            break
        data.append(batch)
    return {
        "model": HeteroscedasticAE(),
        "data": data,
        "loss_fn": nll_loss,
        "make_optimizer": make_optimizer,
        "task": "regression",
    }


def main():
    torch.manual_seed(SEED)
    train_loader, val_loader, (X_test, y_test) = build_loaders()
    model = HeteroscedasticAE()
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=10, gamma=0.5)
    n_batches = len(train_loader)
    print(f"  | Name    | Type              | Params")
    print(f"0 | model   | HeteroscedasticAE | {sum(p.numel() for p in model.parameters()):,}")
    for epoch in range(EPOCHS):
        t0 = time.time()
        total = 0.0
        for batch in train_loader:
            loss = nll_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        scheduler.step()
        val_nll, val_mse = evaluate(model, val_loader)
        it_s = n_batches / max(time.time() - t0, 1e-6)
        print(f"Epoch {epoch}: 100%|##########| {n_batches}/{n_batches} [{it_s:.1f}it/s, "
              f"train_nll={total / n_batches:.4f}, val_nll={val_nll:.4f}, val_mse={val_mse:.4f}, "
              f"lr={scheduler.get_last_lr()[0]:.1e}]")
    print(f"`Trainer.fit` stopped: `max_epochs={EPOCHS}` reached.")
    print(f"test fault-detection AUROC (summed per-sensor NLL): {anomaly_auroc(model, X_test, y_test):.4f}")


if __name__ == "__main__":
    main()
