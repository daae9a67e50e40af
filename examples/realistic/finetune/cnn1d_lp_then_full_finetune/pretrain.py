"""Pretrain the conv backbone on the source task (dominant-tone classification, 8 bins).

Saves the backbone weights to backbone_pretrained.pt.
"""
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from backbone import ConvBackbone
from signals import N_FREQ_BINS, make_signals

torch.manual_seed(0)
torch.set_num_threads(2)

x, factors = make_signals(20000, seed=11)
x = torch.from_numpy(x)
y = torch.from_numpy(factors["freq_bin"]).long()

backbone = ConvBackbone()
head = nn.Linear(backbone.out_dim, N_FREQ_BINS)
params = list(backbone.parameters()) + list(head.parameters())
opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=1e-4)
t0 = time.time()
for epoch in range(4):
    perm = torch.randperm(len(x))
    tot, correct = 0.0, 0
    for i in range(0, len(x), 128):
        idx = perm[i:i + 128]
        logits = head(backbone(x[idx]))
        loss = F.cross_entropy(logits, y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        tot += loss.item() * len(idx)
        correct += (logits.argmax(1) == y[idx]).sum().item()
    print(f"pretrain epoch {epoch + 1}: loss {tot / len(x):.4f} acc {correct / len(x):.4f} ({time.time() - t0:.1f}s)")

torch.save(backbone.state_dict(), "backbone_pretrained.pt")
