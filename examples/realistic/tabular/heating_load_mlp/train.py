"""Daily heating-energy regression (kWh) for small buildings: MLP on standardised tabular features."""
import copy
import logging
import os
import time

import numpy as np
import torch
import torch.nn as nn

logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
logger = logging.getLogger("heating")

CSV = os.path.join(os.path.dirname(os.path.abspath(__file__)), "heating_load.csv")
TARGET = "heating_kwh"

cfg = {
    "seed": 3,
    "val_frac": 0.15,
    "batch_size": 64,
    "max_epochs": 120,
    "patience": 8,
    "min_delta": 1e-4,
    "lr": 3e-3,
    "weight_decay": 1e-5,
    "width": 128,
}


def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64)
    return header, data


def prepare(seed):
    header, data = read_csv(CSV)
    t = header.index(TARGET)
    feats = [i for i in range(len(header)) if i != t]
    X, y = data[:, feats], data[:, t:t + 1]
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X))
    n_val = int(cfg["val_frac"] * len(X))
    va, tr = perm[:n_val], perm[n_val:]
    x_mu, x_sd = X[tr].mean(0), X[tr].std(0)
    y_mu, y_sd = y[tr].mean(0), y[tr].std(0)
    norm_x = lambda a: torch.tensor((a - x_mu) / x_sd, dtype=torch.float32)
    norm_y = lambda a: torch.tensor((a - y_mu) / y_sd, dtype=torch.float32)
    train = (norm_x(X[tr]), norm_y(y[tr]))
    val = (norm_x(X[va]), norm_y(y[va]))
    return train, val, float(y_sd[0]), [header[i] for i in feats]


def mlp(n_in, width):
    return nn.Sequential(
        nn.Linear(n_in, width), nn.SiLU(),
        nn.Linear(width, width), nn.SiLU(),
        nn.Linear(width, 1),
    )


mse = nn.MSELoss()


def loss_fn(model, batch):
    x, y = batch
    return mse(model(x), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=cfg["lr"], weight_decay=cfg["weight_decay"])


def batches(x, y, bs, gen):
    idx = torch.randperm(len(x), generator=gen)
    for k in range(0, len(x), bs):
        b = idx[k:k + bs]
        yield x[b], y[b]


def make_target():
    torch.manual_seed(cfg["seed"])
    (xtr, ytr), _, _, names = prepare(cfg["seed"])
    model = mlp(xtr.shape[1], cfg["width"])
    gen = torch.Generator().manual_seed(cfg["seed"])
    it = batches(xtr, ytr, cfg["batch_size"], gen)
    data = [next(it) for _ in range(4)]
    return dict(model=model, batch=data[0], data=data, loss_fn=loss_fn,
                optimizer=make_optimizer(model.parameters()), make_optimizer=make_optimizer,
                task="regression")


def main():
    torch.manual_seed(cfg["seed"])
    (xtr, ytr), (xva, yva), y_scale, names = prepare(cfg["seed"])
    logger.info("features: %s", ", ".join(names))
    logger.info("train %d rows, val %d rows, target std %.1f kWh", len(xtr), len(xva), y_scale)
    model = mlp(xtr.shape[1], cfg["width"])
    opt = make_optimizer(model.parameters())
    gen = torch.Generator().manual_seed(cfg["seed"])

    best_val, best_state, best_epoch, bad_epochs = float("inf"), None, 0, 0
    t_start = time.time()
    for epoch in range(1, cfg["max_epochs"] + 1):
        model.train()
        s, n = 0.0, 0
        for xb, yb in batches(xtr, ytr, cfg["batch_size"], gen):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            s += loss.item() * len(xb)
            n += len(xb)
        model.eval()
        with torch.no_grad():
            val_loss = loss_fn(model, (xva, yva)).item()
        rmse_kwh = (val_loss ** 0.5) * y_scale
        logger.info("epoch %d train_loss=%.4f val_loss=%.4f val_rmse_kwh=%.2f", epoch, s / n, val_loss, rmse_kwh)
        if val_loss < best_val - cfg["min_delta"]:
            best_val, best_epoch, bad_epochs = val_loss, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
        else:
            bad_epochs += 1
            logger.info("val_loss did not improve from %.4f (patience %d/%d)", best_val, bad_epochs, cfg["patience"])
            if bad_epochs >= cfg["patience"]:
                logger.info("early stopping at epoch %d", epoch)
                break
    model.load_state_dict(best_state)
    logger.info("restored best epoch %d: val_loss=%.4f val_rmse_kwh=%.2f (%.1fs)",
                best_epoch, best_val, best_val ** 0.5 * y_scale, time.time() - t_start)


if __name__ == "__main__":
    main()
