"""Sequence classification with a small MLM-pretrained transformer encoder.

1. Pretrain a 2-layer encoder with masked-token prediction on synthetic
   Markov-chain "event logs".
2. Fine-tune on a downstream task (does the log contain the event pair
   7->13 / 13->7 back to back?) with ULMFiT-style gradual unfreezing:
   head only first, then the top encoder layer, then everything.
Log lines follow the HF Trainer format.
"""
import math
import os
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "mlm_encoder.pt")

VOCAB = 40
PAD, CLS, MASK = 0, 1, 2
FIRST_TOK = 3
SEQ_LEN = 32                     # + 1 for [CLS]
D_MODEL = 64
N_HEADS = 4
N_LAYERS = 2
D_FF = 128

PRETRAIN_STEPS = 300
PRETRAIN_BS = 64
MASK_PROB = 0.15

PAIR = (7, 13)
FT_TRAIN_N = 1600
FT_VAL_N = 1000
FT_BS = 32
FT_EPOCHS = 7
FT_LR = 1e-3
WARMUP_RATIO = 0.1
LOGGING_STEPS = 25
# epoch index -> encoder blocks that become trainable at the start of that epoch
UNFREEZE_SCHEDULE = {1: ["layers.1", "norm"], 2: ["layers.0", "tok_emb", "pos_emb"]}


# ----------------------------------------------------------------------------
# synthetic event logs
# ----------------------------------------------------------------------------
def markov_transition(seed=0):
    rng = np.random.default_rng(seed)
    n = VOCAB - FIRST_TOK
    logits = rng.normal(0, 1.5, size=(n, n))
    # each event has a handful of likely successors
    for i in range(n):
        logits[i, rng.choice(n, size=4, replace=False)] += 3.0
    p = np.exp(logits)
    return p / p.sum(1, keepdims=True)


TRANSITION = markov_transition()


def sample_chains(n, rng):
    k = VOCAB - FIRST_TOK
    out = np.empty((n, SEQ_LEN), dtype=np.int64)
    state = rng.integers(0, k, size=n)
    cum = TRANSITION.cumsum(1)
    for t in range(SEQ_LEN):
        out[:, t] = state
        u = rng.random(n)
        state = (cum[state] < u[:, None]).sum(1).clip(max=k - 1)
    return out + FIRST_TOK


def has_pair(seq, a, b):
    s = np.asarray(seq)
    return bool(np.any(((s[:-1] == a) & (s[1:] == b)) | ((s[:-1] == b) & (s[1:] == a))))


def make_classification_set(n, seed):
    """Balanced set; both classes contain the two events, only positives have them adjacent."""
    rng = np.random.default_rng(seed)
    a, b = PAIR
    seqs = sample_chains(n, rng)
    labels = np.zeros(n, dtype=np.int64)
    others = [t for t in range(FIRST_TOK, VOCAB) if t not in PAIR]
    for i in range(n):
        s = seqs[i]
        # scrub any naturally occurring adjacent pair first
        for j in range(SEQ_LEN - 1):
            if (s[j], s[j + 1]) in ((a, b), (b, a)):
                s[j + 1] = rng.choice(others)
        if i % 2 == 0:
            p = rng.integers(0, SEQ_LEN - 1)
            first, second = (a, b) if rng.random() < 0.5 else (b, a)
            s[p], s[p + 1] = first, second
            labels[i] = 1
        else:
            while True:
                p, q = sorted(rng.choice(SEQ_LEN, size=2, replace=False))
                if q - p > 1:
                    break
            s[p], s[q] = (a, b) if rng.random() < 0.5 else (b, a)
            # placing the events may have created an adjacency with a neighbour
            for j in range(SEQ_LEN - 1):
                if (s[j], s[j + 1]) in ((a, b), (b, a)) and j + 1 not in (p, q):
                    s[j + 1] = rng.choice(others)
                elif (s[j], s[j + 1]) in ((a, b), (b, a)):
                    s[j] = rng.choice(others)
            labels[i] = int(has_pair(s, a, b))
    cls_col = np.full((n, 1), CLS, dtype=np.int64)
    x = np.concatenate([cls_col, seqs], axis=1)
    return torch.from_numpy(x), torch.from_numpy(labels)


def mlm_batch(rng, batch_size):
    seqs = sample_chains(batch_size, rng)
    x = np.concatenate([np.full((batch_size, 1), CLS), seqs], axis=1)
    labels = np.full_like(x, -100)
    m = rng.random(x.shape) < MASK_PROB
    m[:, 0] = False
    labels[m] = x[m]
    x = x.copy()
    x[m] = MASK
    return torch.from_numpy(x), torch.from_numpy(labels)


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB, D_MODEL)
        self.pos_emb = nn.Embedding(SEQ_LEN + 1, D_MODEL)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, batch_first=True, norm_first=True)
            for _ in range(N_LAYERS)
        ])
        self.norm = nn.LayerNorm(D_MODEL)

    def forward(self, x):
        pos = torch.arange(x.size(1), device=x.device)
        h = self.tok_emb(x) + self.pos_emb(pos)
        for layer in self.layers:
            h = layer(h)
        return self.norm(h)


class MLMModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.lm_head = nn.Linear(D_MODEL, VOCAB)

    def forward(self, x):
        return self.lm_head(self.encoder(x))


class SequenceClassifier(nn.Module):
    def __init__(self, n_classes=2):
        super().__init__()
        self.encoder = Encoder()
        self.dropout = nn.Dropout(0.1)
        self.head = nn.Linear(D_MODEL, n_classes)

    def forward(self, x):
        h = self.encoder(x)
        return self.head(self.dropout(h[:, 0]))


# ----------------------------------------------------------------------------
# pretraining
# ----------------------------------------------------------------------------
def pretrain():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = MLMModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    t0 = time.time()
    for step in range(1, PRETRAIN_STEPS + 1):
        x, y = mlm_batch(rng, PRETRAIN_BS)
        logits = model(x)
        loss = F.cross_entropy(logits.view(-1, VOCAB), y.view(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"[mlm] step {step}/{PRETRAIN_STEPS} mlm_loss {loss.item():.4f} ({(time.time() - t0) * 1000 / step:.1f}ms/step)")
    torch.save(model.encoder.state_dict(), CKPT_PATH)
    print(f"[mlm] encoder saved to {os.path.basename(CKPT_PATH)}")


# ----------------------------------------------------------------------------
# fine-tuning
# ----------------------------------------------------------------------------
def set_trainable(model, prefixes, flag=True):
    names = []
    for name, p in model.encoder.named_parameters():
        if any(name.startswith(pref) for pref in prefixes):
            p.requires_grad = flag
            names.append(name)
    return names


def build_model():
    torch.manual_seed(1)
    model = SequenceClassifier()
    if os.path.exists(CKPT_PATH):
        model.encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    # stage 0: only the classification head is trained
    for p in model.encoder.parameters():
        p.requires_grad = False
    return model


def get_loaders():
    x_tr, y_tr = make_classification_set(FT_TRAIN_N, seed=21)
    x_va, y_va = make_classification_set(FT_VAL_N, seed=22)
    g = torch.Generator().manual_seed(3)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_tr, y_tr),
                                               batch_size=FT_BS, shuffle=True, generator=g)
    val_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_va, y_va),
                                             batch_size=250, shuffle=False)
    return train_loader, val_loader


def loss_fn(model, batch):
    x, y = batch
    return F.cross_entropy(model(x), y)


def make_optimizer(params):
    trainable = list(params)
    return torch.optim.AdamW(trainable, lr=FT_LR, weight_decay=0.01)


def linear_warmup_decay(total_steps, warmup_steps):
    def fn(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return fn


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    tot, correct, n = 0.0, 0, 0
    for x, y in loader:
        logits = model(x)
        tot += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(-1) == y).sum().item()
        n += len(y)
    return {"eval_loss": round(tot / n, 4), "eval_accuracy": round(correct / n, 4)}


def finetune():
    model = build_model()
    train_loader, val_loader = get_loaders()
    steps_per_epoch = len(train_loader)
    total_steps = FT_EPOCHS * steps_per_epoch
    optimizer = make_optimizer(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, linear_warmup_decay(total_steps, int(WARMUP_RATIO * total_steps)))

    print("***** Running training *****")
    print(f"  Num examples = {len(train_loader.dataset)}")
    print(f"  Num Epochs = {FT_EPOCHS}")
    print(f"  Instantaneous batch size per device = {FT_BS}")
    print(f"  Total optimization steps = {total_steps}")
    t0 = time.time()
    global_step, running, n_running = 0, 0.0, 0
    for epoch in range(FT_EPOCHS):
        if epoch in UNFREEZE_SCHEDULE:
            names = set_trainable(model, UNFREEZE_SCHEDULE[epoch])
            n_tr = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"[unfreeze] epoch {epoch}: {len(names)} encoder tensors now trainable "
                  f"({n_tr} trainable params)")
        model.train()
        for x, y in train_loader:
            loss = loss_fn(model, (x, y))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            global_step += 1
            running += loss.item()
            n_running += 1
            if global_step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.3e}"),
                       "epoch": round(global_step / steps_per_epoch, 2)})
                running, n_running = 0.0, 0
        metrics = evaluate(model, val_loader)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2),
           "train_steps_per_second": round(total_steps / runtime, 2),
           "epoch": float(FT_EPOCHS)})
    return model


def make_target():
    model = build_model()
    train_loader, _ = get_loaders()
    data = []
    for i, batch in enumerate(train_loader):
        if i >= 4:
            break
        data.append(batch)
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


if __name__ == "__main__":
    pretrain()
    finetune()
