"""Pretrain the vibration encoder on 6 fault signatures from the reference test rig."""
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from train import HERE, SIGNATURES, VibrationEncoder, vibration_windows


def main():
    torch.manual_seed(0)
    rng = np.random.default_rng(100)
    kinds = rng.integers(0, len(SIGNATURES), 3000)
    x, y = vibration_windows(kinds, rng), torch.tensor(kinds)
    enc = VibrationEncoder()
    head = nn.Linear(enc.out_dim, len(SIGNATURES))
    opt = torch.optim.Adam(list(enc.parameters()) + list(head.parameters()), lr=3e-3)
    for epoch in range(5):
        perm = torch.randperm(len(x))
        correct = 0
        for i in range(0, len(x), 64):
            j = perm[i:i + 64]
            logits = head(enc(x[j]))
            loss = F.cross_entropy(logits, y[j])
            opt.zero_grad(); loss.backward(); opt.step()
            correct += (logits.argmax(1) == y[j]).sum().item()
        print(f"epoch {epoch} loss {loss.item():.4f} train_acc {correct / len(x):.3f}")
    torch.save(enc.state_dict(), os.path.join(HERE, "backbone.pt"))


if __name__ == "__main__":
    main()
