"""Wrist-IMU gesture classifier: 3-axis accelerometer traces of varying length -> 4 gesture classes.

Batches are bucketed by sequence length so that padding stays small, then packed for the LSTM.
"""
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

GESTURES = ["swipe", "circle", "shake", "tap"]
SEED = 42
BATCH_SIZE = 32
EPOCHS = 12
LR = 1.5e-3
HIDDEN = 48


def synth_gesture(label, rng, gen):
    n = rng.randint(30, 90)
    t = torch.linspace(0, 1, n)
    amp = rng.uniform(0.7, 1.3)
    if label == 0:    # swipe: one smooth push along x
        x = torch.stack([amp * torch.sin(math.pi * t), 0.2 * t, torch.zeros(n)], 1)
    elif label == 1:  # circle: x/y in quadrature
        w = 2 * math.pi * rng.uniform(0.8, 1.5)
        x = torch.stack([amp * torch.cos(w * t), amp * torch.sin(w * t), torch.zeros(n)], 1)
    elif label == 2:  # shake: fast oscillation on x
        w = 2 * math.pi * rng.uniform(4, 7)
        x = torch.stack([amp * torch.sin(w * t), torch.zeros(n), 0.1 * torch.ones(n)], 1)
    else:             # tap: short spike on z in the middle
        c = rng.uniform(0.3, 0.7)
        x = torch.stack([torch.zeros(n), torch.zeros(n), amp * 2 * torch.exp(-((t - c) / 0.05) ** 2)], 1)
    noise = 0.15 * torch.randn(n, 3, generator=gen)
    return (x + noise).float()


def make_split(n, rng):
    gen = torch.Generator().manual_seed(rng.randrange(2 ** 31))
    labels = [rng.randrange(len(GESTURES)) for _ in range(n)]
    seqs = [synth_gesture(y, rng, gen) for y in labels]
    return seqs, torch.tensor(labels)


def make_buckets(seqs, labels, batch_size):
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    seqs = [seqs[i] for i in order]
    labels = labels[order]
    batches = []
    for s in range(0, len(seqs), batch_size):
        chunk = seqs[s:s + batch_size]
        lengths = torch.tensor([len(c) for c in chunk])
        batches.append((pad_sequence(chunk, batch_first=True), lengths, labels[s:s + batch_size]))
    return batches


class GestureLSTM(nn.Module):
    def __init__(self, n_in=3, hidden=HIDDEN, n_classes=len(GESTURES)):
        super().__init__()
        self.lstm = nn.LSTM(n_in, hidden, batch_first=True)
        self.cls = nn.Linear(hidden, n_classes)

    def forward(self, x, lengths):
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        _, (h, _) = self.lstm(packed)
        return self.cls(h[-1])


def compute_loss(model, batch):
    x, lengths, y = batch
    return F.cross_entropy(model(x, lengths), y)


def make_optimizer(params):
    return torch.optim.Adam(params, lr=LR)


def build_data():
    rng = random.Random(SEED)
    train = make_buckets(*make_split(1600, rng), BATCH_SIZE)
    val = make_buckets(*make_split(400, rng), 100)
    return train, val


def make_target():
    torch.manual_seed(SEED)
    train, _ = build_data()
    model = GestureLSTM()
    data = [train[3], train[20], train[40]]
    return dict(model=model, batch=data[0], data=data, loss_fn=compute_loss,
                optimizer=make_optimizer(model.parameters()), make_optimizer=make_optimizer,
                num_classes=len(GESTURES), task="classification")


def main():
    torch.manual_seed(SEED)
    train, val = build_data()
    print(f"train batches: {len(train)}  val batches: {len(val)}  "
          f"lengths {int(train[0][1].min())}..{int(train[-1][1].max())}")
    model = GestureLSTM()
    opt = make_optimizer(model.parameters())
    shuffler = random.Random(SEED)
    step = 0
    for epoch in range(EPOCHS):
        model.train()
        t0 = time.time()
        shuffler.shuffle(train)
        tot = 0.0
        for batch in train:
            loss = compute_loss(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            tot += loss.item()
            step += 1
            if step % 20 == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        model.eval()
        vl, correct, n = 0.0, 0, 0
        with torch.no_grad():
            for x, lengths, y in val:
                logits = model(x, lengths)
                vl += F.cross_entropy(logits, y, reduction="sum").item()
                correct += (logits.argmax(-1) == y).sum().item()
                n += len(y)
        print(f"epoch {epoch} train_loss {tot / len(train):.4f} val_loss {vl / n:.4f} "
              f"val_acc {correct / n:.3f} time {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
