"""Pretrain TicketEncoder as the support team's routing model -> backbone.pt.

20k historical tickets with two labels: the queue the ticket was routed to
(topic) and whether the customer left a satisfied CSAT survey (noisy). Only the
encoder weights are kept; the two heads are thrown away.
"""
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

from train import HERE, PAD, TOPICS, TicketEncoder, make_tickets


def main():
    torch.manual_seed(0)
    ids, topic, sent = make_tickets(20000, seed=1234)
    g = torch.Generator().manual_seed(0)
    csat = torch.where(torch.rand(len(sent), generator=g) < 0.1, 1 - sent, sent)
    enc = TicketEncoder()
    d = enc.tok.embedding_dim
    route_head, csat_head = nn.Linear(d, len(TOPICS)), nn.Linear(d, 2)
    params = list(enc.parameters()) + list(route_head.parameters()) + list(csat_head.parameters())
    opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=0.01)
    steps = 800
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=2e-3, total_steps=steps, pct_start=0.1)
    for step in range(steps):
        j = torch.randint(0, len(ids), (64,), generator=g)
        x = ids[j]
        h = enc(x)
        keep = x.ne(PAD).unsqueeze(-1).float()
        pooled = (h * keep).sum(1) / keep.sum(1)
        l_route = F.cross_entropy(route_head(pooled), topic[j])
        l_csat = F.cross_entropy(csat_head(pooled), csat[j])
        loss = l_route + l_csat
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"step {step} route_loss {l_route.item():.4f} csat_loss {l_csat.item():.4f}")
    torch.save(enc.state_dict(), os.path.join(HERE, "backbone.pt"))


if __name__ == "__main__":
    main()
