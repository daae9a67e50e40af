"""Pretrain the encoder as a masked-feature denoising autoencoder on unlabeled logs.

Writes dae_pretrained.pt (full DenoisingAE state_dict) and feature_stats.json.
"""
import json
import time

import numpy as np
import torch
import torch.nn.functional as F

from data import sample_panel
from models import DenoisingAE

torch.manual_seed(0)
torch.set_num_threads(1)

x, _ = sample_panel(30000, seed=7)  # labels are not used for pretraining
mean, std = x.mean(0), x.std(0) + 1e-6
x = torch.from_numpy((x - mean) / std)

model = DenoisingAE()
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=1e-4)
t0 = time.time()
for epoch in range(25):
    perm = torch.randperm(len(x))
    tot = 0.0
    for i in range(0, len(x), 256):
        xb = x[perm[i:i + 256]]
        keep = (torch.rand_like(xb) > 0.3).float()
        recon = model(xb * keep)
        loss = F.mse_loss(recon, xb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        tot += loss.item() * len(xb)
    print(f"pretrain epoch {epoch + 1}/25  recon_mse {tot / len(x):.4f}  ({time.time() - t0:.1f}s)")

torch.save(model.state_dict(), "dae_pretrained.pt")
with open("feature_stats.json", "w") as f:
    json.dump({"mean": mean.tolist(), "std": std.tolist()}, f)
