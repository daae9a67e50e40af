"""Pretrain SignalEncoder on a generic waveform-family task and save backbone.pt.

Source task: 6-way classification of synthetic waveforms (sine, square, saw,
chirp, AM, noisy bursts) with random frequency, phase and amplitude. Run once;
train.py only loads the saved weights.
"""
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from train import SignalEncoder

L = 128


def waveform(rng, kind):
    t = np.linspace(0, 1, L, dtype=np.float32)
    f = rng.uniform(2, 12)
    ph = rng.uniform(0, 2 * np.pi)
    a = rng.uniform(0.5, 1.5)
    if kind == 0:
        s = np.sin(2 * np.pi * f * t + ph)
    elif kind == 1:
        s = np.sign(np.sin(2 * np.pi * f * t + ph))
    elif kind == 2:
        s = 2 * ((f * t + ph / (2 * np.pi)) % 1.0) - 1
    elif kind == 3:
        s = np.sin(2 * np.pi * (f * t + rng.uniform(5, 15) * t ** 2) + ph)
    elif kind == 4:
        s = (1 + 0.8 * np.sin(2 * np.pi * rng.uniform(0.5, 2) * t)) * np.sin(2 * np.pi * 3 * f * t + ph) / 1.8
    else:
        s = np.zeros(L, dtype=np.float32)
        for _ in range(rng.integers(2, 5)):
            c = rng.integers(5, L - 5)
            w = rng.integers(2, 8)
            s[max(0, c - w):c + w] += rng.normal(0, 1.0, size=len(s[max(0, c - w):c + w]))
    s = a * s + rng.normal(0, 0.15, size=L) + rng.uniform(-0.3, 0.3)
    return s.astype(np.float32)


def main():
    rng = np.random.default_rng(123)
    torch.manual_seed(123)
    n = 6000
    y = rng.integers(0, 6, size=n)
    x = np.stack([waveform(rng, k) for k in y])[:, None, :]
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    enc = SignalEncoder()
    head = nn.Linear(enc.out_dim, 6)
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=3e-3)
    for epoch in range(6):
        perm = torch.randperm(n)
        correct = 0
        for i in range(0, n, 128):
            j = perm[i:i + 128]
            out = head(enc(x[j]))
            loss = F.cross_entropy(out, y[j])
            opt.zero_grad()
            loss.backward()
            opt.step()
            correct += (out.argmax(1) == y[j]).sum().item()
        print(f"pretrain epoch {epoch} loss {loss.item():.4f} acc {correct / n:.3f}")
    torch.save(enc.state_dict(), "backbone.pt")
    print("saved backbone.pt")


if __name__ == "__main__":
    main()
