"""Pretrain the ticket encoder on 8 fine-grained topics and save backbone.pt."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from train import BACKBONE_PATH, TOPICS, TicketEncoder, synth_tickets

torch.manual_seed(0)
x, topics, _ = synth_tickets(6000, seed=7)
enc = TicketEncoder()
head = nn.Linear(enc.hidden_size, len(TOPICS))
opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=3e-3, weight_decay=0.01)
for epoch in range(4):
    perm = torch.randperm(len(x))
    tot, correct = 0.0, 0
    for s in range(0, len(x), 64):
        j = perm[s:s + 64]
        logits = head(enc(x[j]))
        loss = F.cross_entropy(logits, topics[j])
        opt.zero_grad()
        loss.backward()
        opt.step()
        tot += loss.item() * len(j)
        correct += (logits.argmax(-1) == topics[j]).sum().item()
    print(f"pretrain epoch {epoch}: loss {tot / len(x):.4f} acc {correct / len(x):.4f}")
torch.save(enc.state_dict(), BACKBONE_PATH)
