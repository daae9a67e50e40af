# Land-cover classification of Sentinel-2-like pixels (10 bands + 2 indices).
# Synthetic reflectance spectra are generated deterministically below.
import json
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = dict(
    n_pixels=9000,
    batch_size=256,
    epochs=12,
    lr=2e-3,
    weight_decay=0.01,
    hidden=128,
    eval_split=0.15,
    logging_steps=20,
    seed=7,
)
CLASSES = ["water", "forest", "cropland", "grassland", "urban", "bare_soil"]
BANDS = ["B2", "B3", "B4", "B5", "B6", "B7", "B8", "B8A", "B11", "B12"]

# mean surface reflectance per class (rough spectral signatures)
SIGNATURES = np.array([
    [0.06, 0.05, 0.03, 0.03, 0.02, 0.02, 0.02, 0.02, 0.01, 0.01],  # water
    [0.03, 0.05, 0.03, 0.08, 0.22, 0.28, 0.30, 0.31, 0.15, 0.07],  # forest
    [0.05, 0.08, 0.07, 0.12, 0.25, 0.30, 0.33, 0.34, 0.22, 0.13],  # cropland
    [0.05, 0.08, 0.08, 0.12, 0.20, 0.23, 0.25, 0.26, 0.25, 0.16],  # grassland
    [0.10, 0.11, 0.12, 0.13, 0.14, 0.15, 0.16, 0.16, 0.18, 0.16],  # urban
    [0.09, 0.12, 0.15, 0.18, 0.20, 0.21, 0.22, 0.23, 0.30, 0.26],  # bare soil
], dtype=np.float32)


def synth_pixels(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, len(CLASSES), n)
    illum = rng.lognormal(0.0, 0.25, (n, 1)).astype(np.float32)     # sun angle / haze
    refl = SIGNATURES[y] * illum + rng.normal(0, 0.04, (n, len(BANDS))).astype(np.float32)
    refl = np.clip(refl, 0.0, 1.0)
    red, nir, swir = refl[:, 2], refl[:, 6], refl[:, 8]
    ndvi = (nir - red) / (nir + red + 1e-3)
    ndbi = (swir - nir) / (swir + nir + 1e-3)
    X = np.concatenate([refl, ndvi[:, None], ndbi[:, None]], 1).astype(np.float32)
    return X, y.astype(np.int64)


class PixelDataset(torch.utils.data.Dataset):
    def __init__(self, X, y, mean, std):
        self.X = torch.from_numpy((X - mean) / std)
        self.y = torch.from_numpy(y)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"pixel_values": self.X[i], "labels": self.y[i]}


class SpectralClassifier(nn.Module):
    def __init__(self, n_in, n_classes, hidden):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(),
        )
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, pixel_values):
        return self.head(self.encoder(pixel_values))


def compute_loss(model, batch):
    out = model(batch["pixel_values"])
    return F.cross_entropy(out, batch["labels"])


class Trainer:
    def __init__(self, model, cfg, train_ds, eval_ds):
        self.model, self.cfg = model, cfg
        g = torch.Generator().manual_seed(cfg["seed"])
        self.train_dl = torch.utils.data.DataLoader(train_ds, batch_size=cfg["batch_size"],
                                                    shuffle=True, generator=g)
        self.eval_dl = torch.utils.data.DataLoader(eval_ds, batch_size=1024)
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"],
                                           weight_decay=cfg["weight_decay"])
        total = cfg["epochs"] * len(self.train_dl)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: max(0.0, 1.0 - s / total))
        self.global_step = 0

    @torch.no_grad()
    def evaluate(self):
        self.model.eval()
        losses, correct, n = 0.0, 0, 0
        for batch in self.eval_dl:
            out = self.model(batch["pixel_values"])
            losses += F.cross_entropy(out, batch["labels"], reduction="sum").item()
            correct += (out.argmax(-1) == batch["labels"]).sum().item()
            n += len(batch["labels"])
        self.model.train()
        return {"eval_loss": round(losses / n, 4), "eval_accuracy": round(correct / n, 4)}

    def train(self):
        cfg = self.cfg
        self.model.train()
        t0 = time.time()
        running, k = 0.0, 0
        for epoch in range(cfg["epochs"]):
            for batch in self.train_dl:
                loss = compute_loss(self.model, batch)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
                self.optimizer.step()
                self.scheduler.step()
                self.global_step += 1
                running += loss.item(); k += 1
                if self.global_step % cfg["logging_steps"] == 0:
                    ep = self.global_step / len(self.train_dl)
                    print({"loss": round(running / k, 4), "grad_norm": round(gn.item(), 4),
                           "learning_rate": self.scheduler.get_last_lr()[0], "epoch": round(ep, 2)})
                    running, k = 0.0, 0
            metrics = self.evaluate()
            metrics["epoch"] = float(epoch + 1)
            print(metrics)
        rt = time.time() - t0
        print({"train_runtime": round(rt, 2), "train_steps_per_second": round(self.global_step / rt, 2),
               "epoch": float(cfg["epochs"])})


def build(cfg=CONFIG):
    torch.manual_seed(cfg["seed"])
    X, y = synth_pixels(cfg["n_pixels"], cfg["seed"])
    n_eval = int(len(y) * cfg["eval_split"])
    Xtr, ytr, Xev, yev = X[n_eval:], y[n_eval:], X[:n_eval], y[:n_eval]
    mean, std = Xtr.mean(0), Xtr.std(0) + 1e-6
    train_ds, eval_ds = PixelDataset(Xtr, ytr, mean, std), PixelDataset(Xev, yev, mean, std)
    model = SpectralClassifier(X.shape[1], len(CLASSES), cfg["hidden"])
    return Trainer(model, cfg, train_ds, eval_ds)


def make_target():
    trainer = build()
    return {"model": trainer.model, "batch": next(iter(trainer.train_dl)), "loss_fn": compute_loss,
            "optimizer": trainer.optimizer, "num_classes": len(CLASSES)}


if __name__ == "__main__":
    trainer = build()
    print(f"***** Running training *****\n  Num examples = {len(trainer.train_dl.dataset)}\n"
          f"  Num Epochs = {CONFIG['epochs']}\n  Total optimization steps = "
          f"{CONFIG['epochs'] * len(trainer.train_dl)}")
    trainer.train()
