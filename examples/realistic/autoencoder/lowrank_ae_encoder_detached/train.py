"""MLP autoencoder on synthetic low-rank 16x16 images, written LightningModule-style.

The images are random combinations of 6 smooth basis patterns plus a little pixel noise,
so a 16-d bottleneck can reconstruct them down to the noise floor (MSE ~ 0.0025).
The small `Trainer` below prints what Lightning prints: device lines, the model
summary table, one progress-bar line per epoch.

    python train.py [--max-epochs 15] [--lr 1e-3]
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

SIDE = 16
RANK = 6
NOISE = 0.05


def make_basis(seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.linspace(0, 1, SIDE), torch.linspace(0, 1, SIDE), indexing="ij")
    basis = []
    for _ in range(RANK):
        fy, fx = torch.randint(1, 4, (2,), generator=g).tolist()
        py, px = (2 * math.pi * torch.rand(2, generator=g)).tolist()
        basis.append(torch.cos(math.pi * fy * yy + py) * torch.cos(math.pi * fx * xx + px))
    return torch.stack(basis).reshape(RANK, -1)


def make_images(n, basis, seed):
    g = torch.Generator().manual_seed(seed)
    coeffs = torch.randn(n, RANK, generator=g)
    return coeffs @ basis + NOISE * torch.randn(n, SIDE * SIDE, generator=g)


class LitAutoEncoder(nn.Module):
    def __init__(self, latent_dim=16, hidden=128, lr=1e-3):
        super().__init__()
        self.lr = lr
        self.encoder = nn.Sequential(nn.Linear(SIDE * SIDE, hidden), nn.ReLU(), nn.Linear(hidden, latent_dim))
        self.decoder = nn.Sequential(nn.Linear(latent_dim, hidden), nn.ReLU(), nn.Linear(hidden, SIDE * SIDE))
        self.logged = {}

    def log(self, name, value, prog_bar=False):
        self.logged[name] = value.detach() if torch.is_tensor(value) else value

    @torch.no_grad()
    def encode(self, x):
        """Latent codes, also used for the latent-space plots after training."""
        return self.encoder(x)

    def forward(self, x):
        return self.decoder(self.encode(x))

    def training_step(self, batch, batch_idx):
        (x,) = batch
        x_hat = self(x)
        loss = F.mse_loss(x_hat, x)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        (x,) = batch
        loss = F.mse_loss(self(x), x)
        self.log("val_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


# --- minimal stand-in for lightning.Trainer (same console output) -------------------------

def human_count(n):
    labels = [" ", "K", "M", "B"]
    digits = int(math.floor(math.log10(n)) + 1) if n > 0 else 1
    groups = min(int(math.ceil(digits / 3)), len(labels))
    value, idx = n * 10 ** (-3 * (groups - 1)), groups - 1
    if idx < 1 or value >= 100:
        return f"{int(value):,d} {labels[idx]}"
    return f"{value:,.1f} {labels[idx]}"


def print_summary(model):
    rows = [(str(i), name, type(m).__name__, human_count(sum(p.numel() for p in m.parameters())),
             "train" if m.training else "eval") for i, (name, m) in enumerate(model.named_children())]
    head = ("", "Name", "Type", "Params", "Mode")
    widths = [max(len(r[c]) for r in rows + [head]) for c in range(5)]
    line = lambda r: " | ".join(v.ljust(w) for v, w in zip(r, widths))
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(line(head))
    print("-" * len(line(head)))
    for r in rows:
        print(line(r))
    print("-" * len(line(head)))
    print(f"{human_count(trainable):<10}Trainable params")
    print(f"{human_count(total - trainable):<10}Non-trainable params")
    print(f"{human_count(total):<10}Total params")
    print(f"{total * 4 / 1e6:<10.3f}Total estimated model params size (MB)")
    mods = list(model.modules())
    print(f"{sum(m.training for m in mods):<10}Modules in train mode")
    print(f"{sum(not m.training for m in mods):<10}Modules in eval mode")


def fmt_time(s):
    return f"{int(s) // 60:02d}:{int(s) % 60:02d}"


def bar(prefix, n, total, elapsed, postfix=""):
    """tqdm's ascii bar: ' 123456789#' charset, 10 cells."""
    rate = n / elapsed if elapsed > 0 else 0.0
    full, part = divmod(int(n / total * 100), 10)
    cells = "#" * full + (str(part) if part else " ") + " " * (9 - full) if full < 10 else "#" * 10
    remaining = (total - n) / rate if rate > 0 else 0.0
    return (f"{prefix}: {100 * n / total:3.0f}%|{cells}| {n}/{total} "
            f"[{fmt_time(elapsed)}<{fmt_time(remaining)}, {rate:.2f}it/s{postfix}]")


class Trainer:
    def __init__(self, max_epochs, num_sanity_val_steps=2, refresh_rate=10):
        self.max_epochs = max_epochs
        self.refresh_rate = refresh_rate
        self.num_sanity_val_steps = num_sanity_val_steps

    @staticmethod
    def _fmt(postfix):
        return "".join(f", {k}={v}" for k, v in postfix.items())

    @torch.no_grad()
    def _validate(self, model, loader, limit=None):
        model.eval()
        losses = []
        for i, batch in enumerate(loader):
            if limit is not None and i >= limit:
                break
            losses.append(model.validation_step(batch, i))
        model.train()
        return torch.stack(losses).mean()

    def fit(self, model, train_loader, val_loader):
        print("GPU available: False, used: False")
        print("TPU available: False, using: 0 TPU cores")
        print("HPU available: False, using: 0 HPUs")
        print()
        print_summary(model)
        t0 = time.time()
        self._validate(model, val_loader, limit=self.num_sanity_val_steps)
        print(bar("Sanity Checking DataLoader 0", self.num_sanity_val_steps, self.num_sanity_val_steps,
                  time.time() - t0))
        optimizer = model.configure_optimizers()
        model.train()
        postfix = {"v_num": "0"}
        for epoch in range(self.max_epochs):
            t0 = time.time()
            n = len(train_loader)
            for batch_idx, batch in enumerate(train_loader):
                loss = model.training_step(batch, batch_idx)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                postfix["train_loss"] = f"{model.logged['train_loss'].item():.4f}"
                if (batch_idx + 1) % self.refresh_rate == 0 and batch_idx + 1 < n:
                    print(bar(f"Epoch {epoch}", batch_idx + 1, n, time.time() - t0, self._fmt(postfix)))
            postfix["val_loss"] = f"{self._validate(model, val_loader).item():.4f}"
            print(bar(f"Epoch {epoch}", n, n, time.time() - t0, self._fmt(postfix)), flush=True)
        print(f"`Trainer.fit` stopped: `max_epochs={self.max_epochs}` reached.")


# -------------------------------------------------------------------------------------------

def build_data(batch_size=64):
    basis = make_basis()
    train = TensorDataset(make_images(2560, basis, seed=1))
    val = TensorDataset(make_images(512, basis, seed=2))
    return (DataLoader(train, batch_size=batch_size, shuffle=True),
            DataLoader(val, batch_size=256))


def loss_fn(model, batch):
    return model.training_step(batch, 0)


def make_target():
    torch.manual_seed(0)
    train_loader, _ = build_data()
    model = LitAutoEncoder()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": model.configure_optimizers(),
            "make_optimizer": lambda params: torch.optim.Adam(params, lr=model.lr),
            "task": "regression"}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    print(f"Seed set to {args.seed}")
    train_loader, val_loader = build_data(args.batch_size)
    model = LitAutoEncoder(lr=args.lr)
    Trainer(max_epochs=args.max_epochs).fit(model, train_loader, val_loader)


if __name__ == "__main__":
    main()
