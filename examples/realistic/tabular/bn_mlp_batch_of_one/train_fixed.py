"""Wine-quality style tabular classifier (3 quality bands) with a BatchNorm MLP.

Keras-like progress output: one line per epoch with loss/accuracy and
validation metrics.

    python train.py [--epochs 8] [--batch-size 128]
"""
import argparse
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

COLUMNS = ["fixed_acidity", "volatile_acidity", "citric_acid", "residual_sugar", "chlorides",
           "free_sulfur_dioxide", "total_sulfur_dioxide", "density", "pH", "sulphates", "alcohol"]
BANDS = ["low", "medium", "high"]
N_ROWS = 5121
VAL_ROWS = 1024


def generate_table(n, seed=2024):
    g = torch.Generator().manual_seed(seed)
    loc = torch.tensor([7.2, 0.34, 0.32, 5.4, 0.056, 30.5, 115.7, 0.9947, 3.22, 0.53, 10.5])
    scale = torch.tensor([1.3, 0.16, 0.14, 4.7, 0.035, 17.7, 56.5, 0.003, 0.16, 0.15, 1.2])
    z = torch.randn(n, len(COLUMNS), generator=g)
    z[:, 7] = 0.6 * z[:, 7] - 0.5 * z[:, 10] + 0.4 * z[:, 3]  # density tracks sugar and alcohol
    x = loc + scale * z
    score = (0.9 * z[:, 10] - 0.7 * z[:, 1] + 0.35 * z[:, 9] - 0.3 * z[:, 4]
             + 0.25 * z[:, 2] * z[:, 10] + 0.5 * torch.randn(n, generator=g))
    y = torch.bucketize(score, torch.tensor([-0.6, 0.7]))
    return x, y


def build_data(batch_size, seed=2024):
    x, y = generate_table(N_ROWS, seed)
    full = TensorDataset(x, y)
    train_ds, val_ds = random_split(full, [N_ROWS - VAL_ROWS, VAL_ROWS],
                                    generator=torch.Generator().manual_seed(seed))
    tr_x = x[train_ds.indices]
    mean, std = tr_x.mean(0), tr_x.std(0)
    norm = lambda t: (t - mean) / std  # noqa: E731
    train_ds = TensorDataset(norm(x[train_ds.indices]), y[train_ds.indices])
    val_ds = TensorDataset(norm(x[val_ds.indices]), y[val_ds.indices])
    train_loader = DataLoader(train_ds, batch_size=batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(val_ds, batch_size=512)
    return train_loader, val_loader


class TabularNet(nn.Module):
    def __init__(self, d_in=len(COLUMNS), hidden=(128, 64), n_classes=len(BANDS), p=0.1):
        super().__init__()
        layers, d = [], d_in
        for h in hidden:
            layers += [nn.Linear(d, h), nn.BatchNorm1d(h), nn.ReLU(), nn.Dropout(p)]
            d = h
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(d, n_classes)

    def forward(self, x):
        return self.out(self.body(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params, lr=2e-3):
    return torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)


def parse_args(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--seed", type=int, default=7)
    return p.parse_args(argv)


def make_target():
    args = parse_args([])
    torch.manual_seed(args.seed)
    train_loader, _ = build_data(args.batch_size)
    model = TabularNet()
    it = iter(train_loader)
    data = [next(it) for _ in range(4)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters(), args.lr),
            "make_optimizer": lambda params: make_optimizer(params, args.lr),
            "num_classes": len(BANDS), "task": "classification"}


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return tot / n, correct / n


def main():
    torch.set_num_threads(1)  # tabular model, no benefit from intra-op threads
    args = parse_args()
    torch.manual_seed(args.seed)
    train_loader, val_loader = build_data(args.batch_size)
    model = TabularNet()
    optimizer = make_optimizer(model.parameters(), args.lr)
    n_params = sum(p.numel() for p in model.parameters())
    print('Model: "tabular_net"')
    print(f"Total params: {n_params:,}")
    print(f"Train on {len(train_loader.dataset)} samples, validate on {len(val_loader.dataset)} samples")
    steps = len(train_loader)
    for epoch in range(1, args.epochs + 1):
        print(f"Epoch {epoch}/{args.epochs}")
        model.train()
        t0 = time.time()
        loss_sum, correct, seen = 0.0, 0, 0
        for x, y in train_loader:
            logits = model(x)
            loss = F.cross_entropy(logits, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            step = seen // args.batch_size if seen % args.batch_size == 0 else steps
            if step % 8 == 0 and step < steps:
                bar = "=" * (30 * step // steps - 1) + ">" + "." * (30 - 30 * step // steps)
                eta = (time.time() - t0) / step * (steps - step)
                print(f"{step:>{len(str(steps))}}/{steps} [{bar}] - ETA: {eta:.0f}s"
                      f" - loss: {loss_sum / seen:.4f} - accuracy: {correct / seen:.4f}", flush=True)
        val_loss, val_acc = evaluate(model, val_loader)
        dt = time.time() - t0
        print(f"{steps}/{steps} [==============================] - {dt:.0f}s {1000 * dt / steps:.0f}ms/step"
              f" - loss: {loss_sum / seen:.4f} - accuracy: {correct / seen:.4f}"
              f" - val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}", flush=True)


if __name__ == "__main__":
    main()
