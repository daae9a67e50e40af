"""Fine-tune the fleet vibration encoder on the new pump site (frozen encoder + new head).

    python train.py --lr 2e-5 --epochs 15
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import make_data
from pretrain_encoder import VibEncoder

HERE = os.path.dirname(os.path.abspath(__file__))

p = argparse.ArgumentParser()
p.add_argument("--ckpt", default=os.path.join(HERE, "encoder.pt"))
p.add_argument("--n-train", type=int, default=640)
p.add_argument("--n-val", type=int, default=400)
p.add_argument("--epochs", type=int, default=15)
p.add_argument("--batch-size", type=int, default=32)
p.add_argument("--lr", type=float, default=2e-3)
p.add_argument("--weight-decay", type=float, default=0.01)
p.add_argument("--seed", type=int, default=42)


class PumpClassifier(nn.Module):
    """Pretrained encoder (frozen, kept in eval mode) + freshly initialised head."""

    def __init__(self, encoder, n_classes):
        super().__init__()
        self.encoder = encoder
        self.head = nn.Sequential(nn.Dropout(0.1), nn.Linear(encoder.out_dim, n_classes))
        for prm in self.encoder.parameters():
            prm.requires_grad = False

    def train(self, mode=True):
        super().train(mode)
        self.encoder.eval()          # frozen BN statistics
        return self

    def forward(self, x):
        return self.head(self.encoder(x))


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def setup(args):
    torch.manual_seed(args.seed)
    encoder = VibEncoder()
    encoder.load_state_dict(torch.load(args.ckpt, map_location="cpu"))
    model = PumpClassifier(encoder, len(make_data.PUMP_CLASSES))
    Xtr, ytr = make_data.make_split("pump", args.n_train, seed=101)
    Xva, yva = make_data.make_split("pump", args.n_val, seed=202)
    g = torch.Generator().manual_seed(args.seed)
    train_loader = DataLoader(TensorDataset(torch.from_numpy(Xtr), torch.from_numpy(ytr)),
                              batch_size=args.batch_size, shuffle=True, generator=g)
    val_loader = DataLoader(TensorDataset(torch.from_numpy(Xva), torch.from_numpy(yva)), batch_size=200)
    trainable = [q for q in model.parameters() if q.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=args.lr, weight_decay=args.weight_decay)
    return model, optimizer, train_loader, val_loader


@torch.no_grad()
def validate(model, loader):
    model.eval()
    loss, acc, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        acc += (logits.argmax(1) == y).sum().item()
        n += len(y)
    return loss / n, acc / n


def fmt_time(s):
    return f"{int(s // 60):02d}:{int(s % 60):02d}"


def fit(args):
    model, optimizer, train_loader, val_loader = setup(args)
    n_train = sum(q.numel() for q in model.parameters() if q.requires_grad)
    n_total = sum(q.numel() for q in model.parameters())
    print(f"  | Name    | Type            | Params\n  0 | encoder | VibEncoder      | {n_total - n_train:,}\n"
          f"  1 | head    | Sequential      | {n_train:,}\n{n_train:,}     Trainable params\n"
          f"{n_total - n_train:,}    Non-trainable params")
    nb = len(train_loader)
    val_loss, val_acc = validate(model, val_loader)
    print(f"Sanity Checking: val_loss={val_loss:.3f}, val_acc={val_acc:.3f}")
    for epoch in range(args.epochs):
        model.train()
        t0 = time.time()
        for i, (x, y) in enumerate(train_loader):
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if (i + 1) % 10 == 0 and i + 1 < nb:
                el = time.time() - t0
                print(f"Epoch {epoch}:  {100 * (i + 1) // nb:3d}%| {i + 1}/{nb} [{fmt_time(el)}<{fmt_time(el / (i + 1) * (nb - i - 1))}, "
                      f"{(i + 1) / max(el, 1e-6):.2f}it/s, v_num=0, train_loss={loss.item():.3f}]")
        val_loss, val_acc = validate(model, val_loader)
        el = time.time() - t0
        print(f"Epoch {epoch}: 100%| {nb}/{nb} [{fmt_time(el)}<00:00, {nb / max(el, 1e-6):.2f}it/s, v_num=0, "
              f"train_loss={loss.item():.3f}, val_loss={val_loss:.3f}, val_acc={val_acc:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={args.epochs}` reached.")


def make_target():
    args = p.parse_args([])
    model, optimizer, train_loader, _ = setup(args)
    model.train()
    return {"model": model, "batch": next(iter(train_loader)), "loss_fn": loss_fn,
            "optimizer": optimizer, "num_classes": len(make_data.PUMP_CLASSES)}


if __name__ == "__main__":
    fit(p.parse_args())
