"""Pretrain the ticket encoder on 10-way topic classification; writes backbone.pt."""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from train import HERE, N_TOPICS, TicketEncoder, make_tickets


def main():
    torch.manual_seed(0)
    x, t = make_tickets(6000, seed=101)
    xv, tv = make_tickets(1000, seed=102)
    enc = TicketEncoder()
    head = nn.Linear(enc.hidden_size, N_TOPICS)
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=2e-3)
    for epoch in range(6):
        enc.train()
        perm = torch.randperm(len(x))
        for i in range(0, len(x), 64):
            j = perm[i:i + 64]
            loss = F.cross_entropy(head(enc(x[j])), t[j])
            opt.zero_grad(); loss.backward(); opt.step()
        enc.eval()
        with torch.no_grad():
            acc = (head(enc(xv)).argmax(-1) == tv).float().mean().item()
        print(f"epoch {epoch} loss {loss.item():.4f} val_topic_acc {acc:.3f}")
    torch.save(enc.state_dict(), os.path.join(HERE, "backbone.pt"))


if __name__ == "__main__":
    main()
