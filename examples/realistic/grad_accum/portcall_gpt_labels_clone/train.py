# Small GPT pretraining on synthetic harbour-master port-call logs.
# Megatron-style logging; micro-batches are accumulated up to the global batch.
import math
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

SEED = 1234
SEQ_LEN = 64
MICRO_BATCH = 8
GLOBAL_BATCH = 32
GRAD_ACC = GLOBAL_BATCH // MICRO_BATCH
TRAIN_ITERS = 200
LOG_INTERVAL = 10
EVAL_INTERVAL = 50
EVAL_ITERS = 8
LR = 1e-3
MIN_LR = 1e-4
WARMUP = 20
WEIGHT_DECAY = 0.01
CLIP_GRAD = 1.0
HIDDEN = 96
HEADS = 4
LAYERS = 2

VESSELS = ["aurora", "baltic", "caspian", "delta", "everest", "fjord", "galway", "horizon", "iberia", "juno",
           "kestrel", "lyra", "meridian", "nordic", "orion", "pacific"]
CARGO = ["containers", "grain", "coal", "timber", "steel", "vehicles", "fuel", "fertilizer"]
EVENTS = ["arrived", "departed", "moored", "anchored", "shifted"]


def synth_log(n_records, rng):
    words = []
    for _ in range(n_records):
        v = rng.choice(VESSELS)
        ev = rng.choice(EVENTS)
        berth = str(rng.randint(1, 12))
        hhmm = f"{rng.randint(0, 23):02d}{rng.choice(['00', '15', '30', '45'])}"
        rec = ["vessel", v, ev]
        if ev in ("arrived", "moored", "shifted"):
            rec += ["berth", *berth, "at", *hhmm]
            if rng.random() < 0.7:
                qty = str(rng.randint(10, 990))
                rec += ["cargo", rng.choice(CARGO), *qty]
        elif ev == "anchored":
            rec += ["roads", "at", *hhmm, "waiting", "berth", *berth]
        else:
            rec += ["at", *hhmm, "pilot", rng.choice(["yes", "no"])]
        words += rec + ["<eor>"]
    return words


class Vocab:
    def __init__(self, words):
        self.itos = sorted(set(words))
        self.stoi = {w: i for i, w in enumerate(self.itos)}

    def __len__(self):
        return len(self.itos)

    def encode(self, words):
        return torch.tensor([self.stoi[w] for w in words], dtype=torch.long)


class TokenWindows(Dataset):
    """Non-overlapping windows of SEQ_LEN + 1 tokens (inputs plus the next-token targets)."""

    def __init__(self, ids, seq_len):
        self.ids = ids
        self.seq_len = seq_len
        self.n = (len(ids) - 1) // seq_len

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        start = i * self.seq_len
        return self.ids[start:start + self.seq_len + 1]


def collate_batch(samples):
    tokens = torch.stack(samples)
    input_ids = tokens[:, :-1].contiguous()
    labels = input_ids.clone()
    return input_ids, labels


def build_datasets():
    rng = random.Random(SEED)
    train_words = synth_log(9000, rng)
    valid_words = synth_log(1000, rng)
    vocab = Vocab(train_words + valid_words)
    return TokenWindows(vocab.encode(train_words), SEQ_LEN), TokenWindows(vocab.encode(valid_words), SEQ_LEN), vocab


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)

    def forward(self, h):
        b, s, d = h.shape
        q, k, v = self.qkv(h).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        ctx = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.dense(ctx.transpose(1, 2).reshape(b, s, d))


class TransformerLayer(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(hidden)
        self.self_attention = SelfAttention(hidden, heads)
        self.post_attention_layernorm = nn.LayerNorm(hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

    def forward(self, h):
        h = h + self.self_attention(self.input_layernorm(h))
        return h + self.mlp(self.post_attention_layernorm(h))


class GPTModel(nn.Module):
    def __init__(self, vocab_size, hidden=HIDDEN, heads=HEADS, layers=LAYERS, max_len=SEQ_LEN):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, hidden)
        self.position_embeddings = nn.Embedding(max_len, hidden)
        self.layers = nn.ModuleList([TransformerLayer(hidden, heads) for _ in range(layers)])
        self.final_layernorm = nn.LayerNorm(hidden)
        self.output_layer = nn.Linear(hidden, vocab_size, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.word_embeddings(input_ids) + self.position_embeddings(pos)
        for layer in self.layers:
            h = layer(h)
        return self.output_layer(self.final_layernorm(h))


def lm_loss(model, batch):
    input_ids, labels = batch
    logits = model(input_ids)
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1))


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}],
                             lr=LR, betas=(0.9, 0.95), eps=1e-8)


def lr_at(it):
    if it < WARMUP:
        return LR * (it + 1) / WARMUP
    frac = min(1.0, (it - WARMUP) / (TRAIN_ITERS - WARMUP))
    return MIN_LR + 0.5 * (LR - MIN_LR) * (1 + math.cos(math.pi * frac))


def make_loaders(train_ds, valid_ds):
    g = torch.Generator().manual_seed(SEED)
    train_loader = DataLoader(train_ds, batch_size=MICRO_BATCH, shuffle=True, drop_last=True,
                              collate_fn=collate_batch, generator=g)
    valid_loader = DataLoader(valid_ds, batch_size=MICRO_BATCH, shuffle=False, collate_fn=collate_batch)
    return train_loader, valid_loader


def infinite(loader):
    while True:
        for batch in loader:
            yield batch


@torch.no_grad()
def evaluate(model, valid_loader):
    model.eval()
    total, n = 0.0, 0
    for i, batch in enumerate(valid_loader):
        if i >= EVAL_ITERS:
            break
        total += lm_loss(model, batch).item()
        n += 1
    model.train()
    return total / n


def make_target():
    torch.manual_seed(SEED)
    train_ds, valid_ds, vocab = build_datasets()
    model = GPTModel(len(vocab))
    train_loader, _ = make_loaders(train_ds, valid_ds)
    it = iter(train_loader)
    data = [next(it) for _ in range(GRAD_ACC)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": lm_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(vocab),
        "task": "lm",
    }


def main():
    torch.manual_seed(SEED)
    train_ds, valid_ds, vocab = build_datasets()
    print(f"> building train/valid datasets: {len(train_ds)} / {len(valid_ds)} samples of {SEQ_LEN} tokens, "
          f"vocab size {len(vocab)}")
    model = GPTModel(len(vocab))
    n_params = sum(p.numel() for p in model.parameters())
    print(f" > number of parameters on (tensor, pipeline) model parallel rank (0, 0): {n_params}")
    print(f"> micro batch size {MICRO_BATCH}, global batch size {GLOBAL_BATCH}, "
          f"gradient accumulation steps {GRAD_ACC}")
    optimizer = make_optimizer(model.parameters())
    train_loader, valid_loader = make_loaders(train_ds, valid_ds)
    batches = infinite(train_loader)

    model.train()
    consumed = 0
    t_last = time.time()
    loss_acc = 0.0
    for it in range(1, TRAIN_ITERS + 1):
        lr = lr_at(it - 1)
        for grp in optimizer.param_groups:
            grp["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        step_loss = 0.0
        for _ in range(GRAD_ACC):
            batch = next(batches)
            loss = lm_loss(model, batch)
            (loss / GRAD_ACC).backward()
            step_loss += loss.item() / GRAD_ACC
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP_GRAD).item()
        optimizer.step()
        consumed += GLOBAL_BATCH
        loss_acc += step_loss

        if it % LOG_INTERVAL == 0:
            elapsed = (time.time() - t_last) * 1000.0 / LOG_INTERVAL
            t_last = time.time()
            print(f" iteration {it:8d}/{TRAIN_ITERS:8d} | consumed samples: {consumed:10d} | "
                  f"elapsed time per iteration (ms): {elapsed:.1f} | learning rate: {lr:.3E} | "
                  f"global batch size: {GLOBAL_BATCH:5d} | lm loss: {loss_acc / LOG_INTERVAL:.6E} | "
                  f"loss scale: 1.0 | grad norm: {grad_norm:.3f} | number of skipped iterations:   0 | "
                  f"number of nan iterations:   0 |")
            loss_acc = 0.0

        if it % EVAL_INTERVAL == 0:
            val = evaluate(model, valid_loader)
            line = (f" validation loss at iteration {it} | lm loss value: {val:.6E} | "
                    f"lm loss PPL: {math.exp(min(val, 20)):.6E} | ")
            print("-" * len(line))
            print(line)
            print("-" * len(line))


if __name__ == "__main__":
    main()
