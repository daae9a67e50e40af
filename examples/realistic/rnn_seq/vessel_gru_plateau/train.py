"""Vessel-track classifier (AIS-like): per-ping (speed, turn rate, accel) sequences of variable
length -> {transit, fishing, anchored, tug}. GRU over packed sequences, grad clipping, and
ReduceLROnPlateau on the validation loss."""
import logging
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

logging.basicConfig(level=logging.INFO, format="%(asctime)s | %(levelname)s | %(message)s")
log = logging.getLogger("vessel")

CLASSES = ("transit", "fishing", "anchored", "tug")
HP = dict(seed=5, n_train=1500, n_val=400, batch=48, epochs=14, lr=4e-3, hidden=64,
          clip=1.0, plateau_factor=0.5, plateau_patience=1)


def track(label, g):
    n = int(torch.randint(25, 110, (1,), generator=g))
    t = torch.arange(n, dtype=torch.float32)
    r = lambda *s: torch.randn(*s, generator=g)
    if label == 0:
        speed = 9 + 3 * r(1) + 1.5 * r(n)
        turn = 2.0 * r(n)
    elif label == 1:
        speed = 5 + 1.5 * torch.sin(2 * math.pi * t / (12 + 10 * torch.rand(1, generator=g))) + 1.5 * r(n)
        turn = 3 * torch.sin(2 * math.pi * t / (8 + 8 * torch.rand(1, generator=g))) + 3 * r(n)
    elif label == 2:
        speed = 1.0 + 1.0 * r(n).abs() + 2 * torch.rand(1, generator=g)
        turn = 4 * r(n)
    else:
        speed = 6 + 2 * torch.sign(torch.sin(2 * math.pi * t / (14 + 12 * torch.rand(1, generator=g)))) + 1.5 * r(n)
        turn = 3.5 * r(n)
    accel = torch.diff(speed, prepend=speed[:1])
    feats = torch.stack([speed / 10, turn / 5, accel], dim=1)
    return feats


def dataset(n, g):
    ys = torch.randint(0, len(CLASSES), (n,), generator=g)
    return [track(int(y), g) for y in ys], ys


def collate(seqs, ys):
    lengths = torch.tensor([len(s) for s in seqs])
    return pad_sequence(seqs, batch_first=True), lengths, ys


def loader(seqs, ys, batch, g=None):
    idx = torch.randperm(len(seqs), generator=g) if g is not None else torch.arange(len(seqs))
    for i in range(0, len(seqs), batch):
        j = idx[i:i + batch]
        yield collate([seqs[k] for k in j], ys[j])


class TrackGRU(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.gru = nn.GRU(3, hidden, num_layers=1, batch_first=True)
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, len(CLASSES)))

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, h_n = self.gru(packed)
        return self.head(h_n[-1])


def loss_fn(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=HP["lr"])


def get_splits():
    g = torch.Generator().manual_seed(HP["seed"])
    return dataset(HP["n_train"], g), dataset(HP["n_val"], g)


def make_target():
    torch.manual_seed(HP["seed"])
    (tr_x, tr_y), _ = get_splits()
    model = TrackGRU(HP["hidden"])
    batches = loader(tr_x, tr_y, HP["batch"], torch.Generator().manual_seed(1))
    data = [next(batches) for _ in range(3)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": loss_fn,
            "optimizer": make_optimizer(model.parameters()), "make_optimizer": make_optimizer,
            "num_classes": len(CLASSES), "task": "classification"}


@torch.no_grad()
def validate(model, xs, ys):
    model.eval()
    total, correct = 0.0, 0
    for x, lengths, y in loader(xs, ys, 200):
        logits = model(x, lengths)
        total += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    return total / len(xs), correct / len(xs)


def main():
    torch.manual_seed(HP["seed"])
    (tr_x, tr_y), (va_x, va_y) = get_splits()
    log.info("train=%d val=%d mean_len=%.1f", len(tr_x), len(va_x), sum(map(len, tr_x)) / len(tr_x))
    model = TrackGRU(HP["hidden"])
    opt = make_optimizer(model.parameters())
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, mode="min", factor=HP["plateau_factor"],
                                                       patience=HP["plateau_patience"])
    g = torch.Generator().manual_seed(1)
    step = 0
    for epoch in range(1, HP["epochs"] + 1):
        model.train()
        ep_loss, nb, clipped = 0.0, 0, 0
        for batch in loader(tr_x, tr_y, HP["batch"], g):
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            gnorm = nn.utils.clip_grad_norm_(model.parameters(), HP["clip"])
            clipped += int(gnorm > HP["clip"])
            opt.step()
            ep_loss += loss.item()
            nb += 1
            step += 1
            if step % 25 == 0:
                log.info("step %d | loss %.4f | grad_norm %.3f", step, loss.item(), gnorm)
        val_loss, val_acc = validate(model, va_x, va_y)
        sched.step(val_loss)
        log.info("epoch %d | train_loss %.4f | val_loss %.4f | val_acc %.3f | lr %.2e | clipped %d/%d",
                 epoch, ep_loss / nb, val_loss, val_acc, opt.param_groups[0]["lr"], clipped, nb)


if __name__ == "__main__":
    main()
