"""Wafer-map defect pattern classifier (none / center / edge-ring / scratch).

Structured like a LightningModule (training_step / validation_step) driven by a
small hand-rolled fit loop. Wafer maps are synthesised: a disc of dies, each die
pass/fail, with pattern-specific failure probability maps.
"""
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HPARAMS = {"seed": 99, "img": 28, "n_train": 1600, "n_val": 400, "batch_size": 32,
           "max_epochs": 3, "lr": 3e-3, "log_every_n_steps": 10}
PATTERNS = ["none", "center", "edge_ring", "scratch"]


def wafer_maps(n, img, seed):
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:img, :img]
    c = (img - 1) / 2
    r = np.sqrt((yy - c) ** 2 + (xx - c) ** 2) / c
    disc = r <= 1.0
    y = rng.integers(0, 4, n)
    X = np.zeros((n, 1, img, img), dtype=np.float32)
    for i, k in enumerate(y):
        p = np.full((img, img), rng.uniform(0.02, 0.08))
        if k == 1:
            p += 0.8 * (r < rng.uniform(0.25, 0.4))
        elif k == 2:
            p += 0.8 * (r > rng.uniform(0.78, 0.85))
        elif k == 3:
            th = rng.uniform(0, np.pi)
            off = rng.uniform(-0.3, 0.3) * c
            d = np.abs((xx - c) * np.sin(th) - (yy - c) * np.cos(th) - off)
            p += 0.85 * (d < 1.0) * (r < rng.uniform(0.6, 0.9))
        fail = rng.random((img, img)) < p
        X[i, 0] = np.where(disc, np.where(fail, 2.0, 1.0), 0.0)   # 0 off-wafer, 1 pass, 2 fail
    return X, y


class WaferCNN(nn.Module):
    def __init__(self, hp):
        super().__init__()
        self.hp = hp
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
        )
        self.classifier = nn.Linear(32 * 4, len(PATTERNS))

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))

    def training_step(self, batch):
        x, y = batch
        logits = self(x)
        loss = F.cross_entropy(logits, y)
        return loss, (logits.argmax(1) == y).float().mean()

    def validation_step(self, batch):
        x, y = batch
        logits = self(x)
        return F.cross_entropy(logits, y, reduction="sum"), (logits.argmax(1) == y).sum()

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hp["lr"])


def dataloaders(hp):
    Xtr, ytr = wafer_maps(hp["n_train"], hp["img"], hp["seed"])
    Xva, yva = wafer_maps(hp["n_val"], hp["img"], hp["seed"] + 1)
    mk = lambda X, y: torch.utils.data.TensorDataset(torch.from_numpy(X), torch.from_numpy(y).long())
    g = torch.Generator().manual_seed(hp["seed"])
    return (torch.utils.data.DataLoader(mk(Xtr, ytr), batch_size=hp["batch_size"], shuffle=True, generator=g),
            torch.utils.data.DataLoader(mk(Xva, yva), batch_size=200))


def loss_fn(model, batch):
    return model.training_step(batch)[0]


def fit(hp=HPARAMS):
    torch.manual_seed(hp["seed"])
    model = WaferCNN(hp)
    opt = model.configure_optimizers()
    train_dl, val_dl = dataloaders(hp)
    step = 0
    print(f"GPU available: False, used: False\n  | Name       | Type       | Params\n"
          f"0 | features   | Sequential | {sum(p.numel() for p in model.features.parameters()):,}\n"
          f"1 | classifier | Linear     | {sum(p.numel() for p in model.classifier.parameters()):,}")
    for epoch in range(hp["max_epochs"]):
        model.train()
        t0 = time.time()
        for batch in train_dl:
            loss, acc = model.training_step(batch)
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step % hp["log_every_n_steps"] == 0:
                print(f"epoch={epoch} step={step} train_loss={loss.item():.4f} train_acc={acc.item():.3f}")
        model.eval()
        with torch.no_grad():
            tot = [model.validation_step(b) for b in val_dl]
        vl = sum(t[0].item() for t in tot) / len(val_dl.dataset)
        va = sum(t[1].item() for t in tot) / len(val_dl.dataset)
        print(f"Epoch {epoch}: val_loss={vl:.4f} val_acc={va:.4f} [{time.time() - t0:.1f}s]")
    print(f"`Trainer.fit` stopped: `max_epochs={hp['max_epochs']}` reached.")


def make_target():
    torch.manual_seed(HPARAMS["seed"])
    model = WaferCNN(HPARAMS)
    train_dl, _ = dataloaders(HPARAMS)
    return {"model": model, "batch": next(iter(train_dl)), "loss_fn": loss_fn,
            "optimizer": model.configure_optimizers(), "num_classes": len(PATTERNS)}


if __name__ == "__main__":
    fit()
