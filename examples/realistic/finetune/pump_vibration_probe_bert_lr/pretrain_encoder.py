"""Upstream job: pretrain the vibration encoder on the fleet fault data -> encoder.pt"""
import os
import torch
import torch.nn as nn
import torch.nn.functional as F

import make_data

HERE = os.path.dirname(os.path.abspath(__file__))


class VibEncoder(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        def block(cin, cout):
            return nn.Sequential(nn.Conv1d(cin, cout, 9, stride=2, padding=4, bias=False),
                                 nn.BatchNorm1d(cout), nn.ReLU(inplace=True))
        self.features = nn.Sequential(block(1, width), block(width, width), block(width, 2 * width),
                                      block(2 * width, 2 * width))
        self.out_dim = 2 * width

    def forward(self, x):
        return self.features(x).mean(-1)


def main(path=os.path.join(HERE, "encoder.pt"), steps=400):
    torch.manual_seed(0)
    X, y = make_data.make_split("fleet", 6000, seed=11)
    X, y = torch.from_numpy(X), torch.from_numpy(y)
    enc = VibEncoder()
    head = nn.Linear(enc.out_dim, len(make_data.FLEET_CLASSES))
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=2e-3)
    for step in range(steps):
        idx = torch.randint(0, len(y), (64,))
        loss = F.cross_entropy(head(enc(X[idx])), y[idx])
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"pretrain step {step} loss {loss.item():.4f}")
    torch.save(enc.state_dict(), path)


if __name__ == "__main__":
    main()
