# Small GPT pretraining on synthetic maintenance-ticket text, word-level tokens.
# Global batch is built from several micro-batches (gradient accumulation) so the
# same config can later run on a box with less memory.
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    seed: int = 0
    n_sentences: int = 12000
    seq_len: int = 48
    micro_batch_size: int = 16
    grad_accum_steps: int = 4
    train_iters: int = 200
    lr: float = 6e-4
    weight_decay: float = 0.1
    clip_grad: float = 1.0
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 128
    dropout: float = 0.0
    log_interval: int = 10
    eval_interval: int = 50
    eval_iters: int = 8


cfg = Config()

SITES = ["north", "south", "east", "west", "harbor", "depot", "yard", "plant"]
ASSETS = ["pump", "valve", "motor", "fan", "compressor", "conveyor", "boiler", "chiller"]
FAULTS = {
    "pump": ["cavitation", "seal-leak", "bearing-noise"],
    "valve": ["stuck-open", "stuck-closed", "seal-leak"],
    "motor": ["overheat", "bearing-noise", "phase-loss"],
    "fan": ["imbalance", "belt-slip", "bearing-noise"],
    "compressor": ["overheat", "oil-low", "surge"],
    "conveyor": ["belt-slip", "jam", "misalignment"],
    "boiler": ["pressure-high", "flame-out", "scale"],
    "chiller": ["refrigerant-low", "overheat", "surge"],
}
ACTIONS = {
    "cavitation": "raise suction pressure", "seal-leak": "replace seal", "bearing-noise": "replace bearing",
    "stuck-open": "service actuator", "stuck-closed": "service actuator", "overheat": "clean cooling path",
    "phase-loss": "check supply breaker", "imbalance": "rebalance rotor", "belt-slip": "tension belt",
    "oil-low": "top up oil", "surge": "adjust load setpoint", "jam": "clear jam", "misalignment": "realign idlers",
    "pressure-high": "open relief valve", "flame-out": "inspect igniter", "scale": "descale tubes",
    "refrigerant-low": "recharge refrigerant",
}
PRIORITY = {"overheat": "high", "flame-out": "high", "pressure-high": "high", "phase-loss": "high", "surge": "medium"}


def make_sentences(n, rng):
    out = []
    for _ in range(n):
        site, asset = rng.choice(SITES), rng.choice(ASSETS)
        fault = rng.choice(FAULTS[asset])
        unit = rng.randint(1, 12)
        prio = PRIORITY.get(fault, "low")
        out.append(f"ticket site {site} {asset} {unit} reports {fault} priority {prio} "
                   f"action {ACTIONS[fault]} status open <eot>")
    return out


def build_data(cfg):
    rng = random.Random(cfg.seed)
    text = make_sentences(cfg.n_sentences, rng)
    words = sorted({w for s in text for w in s.split()})
    stoi = {w: i for i, w in enumerate(words)}
    ids = torch.tensor([stoi[w] for s in text for w in s.split()], dtype=torch.long)
    n_train = int(0.9 * len(ids))
    return ids[:n_train], ids[n_train:], len(words)


def get_batch(ids, cfg, gen):
    ix = torch.randint(len(ids) - cfg.seq_len - 1, (cfg.micro_batch_size,), generator=gen)
    x = torch.stack([ids[i:i + cfg.seq_len] for i in ix])
    y = torch.stack([ids[i + 1:i + 1 + cfg.seq_len] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg, vocab_size):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.lm_head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, mean=0.0, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def compute_loss(model, batch):
    x, y = batch
    logits = model(x)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))


def make_optimizer(params):
    params = list(params)
    if params and isinstance(params[0], tuple):
        decay = [p for n, p in params if p.dim() >= 2]
        no_decay = [p for n, p in params if p.dim() < 2]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay},
                  {"params": no_decay, "weight_decay": 0.0}]
    else:
        groups = [{"params": params, "weight_decay": cfg.weight_decay}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), eps=1e-8)


@torch.no_grad()
def evaluate(model, ids, gen):
    model.eval()
    tot = sum(compute_loss(model, get_batch(ids, cfg, gen)).item() for _ in range(cfg.eval_iters))
    model.train()
    return tot / cfg.eval_iters


def setup():
    torch.manual_seed(cfg.seed)
    train_ids, val_ids, vocab_size = build_data(cfg)
    model = GPT(cfg, vocab_size)
    optimizer = make_optimizer(model.named_parameters())
    return model, optimizer, train_ids, val_ids, vocab_size


def make_target():
    model, optimizer, train_ids, _, vocab_size = setup()
    gen = torch.Generator().manual_seed(cfg.seed)
    data = [get_batch(train_ids, cfg, gen) for _ in range(cfg.grad_accum_steps)]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": compute_loss,
            "optimizer": optimizer, "make_optimizer": make_optimizer,
            "num_classes": vocab_size, "task": "lm"}


def main():
    model, optimizer, train_ids, val_ids, vocab_size = setup()
    train_gen = torch.Generator().manual_seed(cfg.seed)
    val_gen = torch.Generator().manual_seed(cfg.seed + 1)
    gbs = cfg.micro_batch_size * cfg.grad_accum_steps
    print(f"building GPT model ... vocab size {vocab_size}, "
          f"{sum(p.numel() for p in model.parameters())} parameters")
    print(f"train tokens {len(train_ids)}, valid tokens {len(val_ids)}")
    print(f"setting training iterations to {cfg.train_iters}, global batch size {gbs}")

    model.train()
    t_last = time.time()
    for iteration in range(1, cfg.train_iters + 1):
        optimizer.zero_grad(set_to_none=True)
        lm_loss = 0.0
        for _ in range(cfg.grad_accum_steps):
            loss = compute_loss(model, get_batch(train_ids, cfg, train_gen)) / cfg.grad_accum_steps
            loss.backward()
            lm_loss += loss.item()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_grad).item()
        optimizer.step()

        if iteration % cfg.log_interval == 0:
            ms = (time.time() - t_last) * 1000.0 / cfg.log_interval
            t_last = time.time()
            lr = optimizer.param_groups[0]["lr"]
            print(f" iteration {iteration:8d}/{cfg.train_iters:8d} | consumed samples: {iteration * gbs:12d} |"
                  f" elapsed time per iteration (ms): {ms:.1f} | learning rate: {lr:.3E} |"
                  f" global batch size: {gbs:5d} | lm loss: {lm_loss:.6E} | loss scale: 1.0 |"
                  f" grad norm: {grad_norm:.3f} | number of skipped iterations:   0 |"
                  f" number of nan iterations:   0 |")
        if iteration % cfg.eval_interval == 0 or iteration == cfg.train_iters:
            val = evaluate(model, val_ids, val_gen)
            line = (f" validation loss at iteration {iteration} | lm loss value: {val:.6E} |"
                    f" lm loss PPL: {math.exp(min(val, 50)):.6E} |")
            print("-" * len(line))
            print(line)
            print("-" * len(line))


if __name__ == "__main__":
    main()
