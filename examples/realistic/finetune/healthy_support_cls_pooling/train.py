"""Support-ticket intent classifier: tiny pre-LN transformer, pretrained in-script.

Stage 1 ("pretraining"): a 2-layer transformer encoder is trained on a large
pool of historical tickets that only carry the coarse queue they were routed
to (payments / accounts / operations), predicted from the [CLS] token.
Stage 2 (fine-tuning): the routing head is dropped, a fresh 6-way intent head
is put on the [CLS] (position 0) hidden state, and the whole model is
fine-tuned on a small labeled set with discriminative learning rates
(encoder 1e-3, new head 3e-3), AdamW, linear warmup then linear decay.

Tickets are "[CLS] w1 w2 ... wn" right-padded with PAD=0 to the longest ticket
in the batch; attention ignores pads via src_key_padding_mask = (ids == PAD).
Fine-tuning logs imitate a Lightning progress bar.
"""
import math
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 7
PAD, CLS, UNK = 0, 1, 2
N_SPECIAL = 3
INTENTS = ["billing", "login", "shipping", "refund", "bug_report", "cancel"]
NUM_CLASSES = len(INTENTS)

N_FILLER = 200
N_PRODUCT = 40
KEYWORDS_PER_INTENT = 18
VOCAB_SIZE = N_SPECIAL + N_FILLER + N_PRODUCT + KEYWORDS_PER_INTENT * NUM_CLASSES
MIN_WORDS, MAX_WORDS = 4, 32
MAX_LEN = MAX_WORDS + 1

# historical tickets only carry the queue they were routed to
QUEUES = ["payments", "accounts", "operations"]
QUEUE_OF = {0: 0, 3: 0, 1: 1, 5: 1, 2: 2, 4: 2}   # intent id -> queue id
N_ROUTED = 6000
N_TRAIN, N_VAL = 1280, 600

D_MODEL, N_HEADS, N_LAYERS, D_FF = 64, 4, 2, 128

PRETRAIN_STEPS = 250
PRETRAIN_BS = 32
PRETRAIN_LR = 2e-3

FT_EPOCHS = 6
FT_BS = 32
BACKBONE_LR = 1e-3
HEAD_LR = 3e-3
WEIGHT_DECAY = 0.01
WARMUP_FRAC = 0.1
CLIP = 1.0


# ----------------------------------------------------------------------------- data
class TicketGenerator:
    """Bag-of-intent-keywords tickets with Zipf filler, product names and noise."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        ranks = np.arange(1, N_FILLER + 1)
        self.zipf = 1.0 / ranks ** 1.1
        self.zipf /= self.zipf.sum()
        self.filler0 = N_SPECIAL
        self.product0 = N_SPECIAL + N_FILLER
        kw0 = self.product0 + N_PRODUCT
        self.keywords = [list(range(kw0 + c * KEYWORDS_PER_INTENT, kw0 + (c + 1) * KEYWORDS_PER_INTENT))
                         for c in range(NUM_CLASSES)]

    def ticket(self, intent):
        rng = self.rng
        n = int(np.clip(round(self.np_rng.lognormal(2.4, 0.5)), MIN_WORDS, MAX_WORDS))
        words = list(self.np_rng.choice(N_FILLER, size=n, p=self.zipf) + self.filler0)
        n_kw = 2 + int(n > 12) + int(n > 22)
        inserts = [rng.choice(self.keywords[intent]) for _ in range(n_kw)]
        if rng.random() < 0.3:                      # mentions a second, unrelated issue
            other = rng.choice([c for c in range(NUM_CLASSES) if c != intent])
            inserts.append(rng.choice(self.keywords[other]))
        if rng.random() < 0.7:
            inserts.append(self.product0 + rng.randrange(N_PRODUCT))
        for w in inserts:
            words[rng.randrange(n)] = w
        return torch.tensor([CLS] + words, dtype=torch.long)

    def labeled(self, n, label_noise=0.03):
        xs, ys = [], []
        for _ in range(n):
            y = self.rng.randrange(NUM_CLASSES)
            xs.append(self.ticket(y))
            if self.rng.random() < label_noise:
                y = self.rng.randrange(NUM_CLASSES)
            ys.append(y)
        return xs, torch.tensor(ys)


def pad_batch(seqs):
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    return ids


def iterate(xs, ys, batch_size, shuffle, g=None):
    order = torch.randperm(len(xs), generator=g).tolist() if shuffle else list(range(len(xs)))
    for i in range(0, len(xs), batch_size):
        idx = order[i:i + batch_size]
        yield {"input_ids": pad_batch([xs[j] for j in idx]), "labels": ys[idx]}


def build_data():
    gen = TicketGenerator(SEED)
    hist_x, hist_intent = gen.labeled(N_ROUTED, label_noise=0.05)
    routed = (hist_x, torch.tensor([QUEUE_OF[i] for i in hist_intent.tolist()]))
    train = gen.labeled(N_TRAIN)
    val = gen.labeled(N_VAL)
    return routed, train, val


# ----------------------------------------------------------------------------- model
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_emb = nn.Embedding(VOCAB_SIZE, D_MODEL, padding_idx=PAD)
        self.pos_emb = nn.Embedding(MAX_LEN, D_MODEL)
        layer = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, N_LAYERS, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(D_MODEL)

    def forward(self, ids):
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.tok_emb(ids) + self.pos_emb(pos)[None]
        h = self.layers(h, src_key_padding_mask=ids == PAD)
        return self.norm(h)


class QueueRouter(nn.Module):
    """Pretraining wrapper: encoder + routing head on [CLS]; the head is thrown away afterwards."""

    def __init__(self, encoder, n_queues):
        super().__init__()
        self.encoder = encoder
        self.route_head = nn.Linear(D_MODEL, n_queues)

    def forward(self, ids):
        return self.route_head(self.encoder(ids)[:, 0])


class TicketClassifier(nn.Module):
    def __init__(self, encoder, num_classes):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(D_MODEL, num_classes)

    def forward(self, ids):
        h = self.encoder(ids)
        return self.classifier(self.dropout(h[:, 0]))      # [CLS] pooling


def loss_fn(model, batch):
    return F.cross_entropy(model(batch["input_ids"]), batch["labels"])


def make_optimizer(params):
    """AdamW with two param groups: encoder at BACKBONE_LR, the new head at HEAD_LR.

    `params` is model.parameters() of a TicketClassifier: encoder tensors come
    first, the classifier head's weight and bias are the last two.
    """
    params = list(params)
    if params and isinstance(params[0], dict):
        return torch.optim.AdamW(params, lr=HEAD_LR, weight_decay=WEIGHT_DECAY)
    groups = [
        {"params": params[:-2], "lr": BACKBONE_LR, "name": "encoder"},
        {"params": params[-2:], "lr": HEAD_LR, "name": "head"},
    ]
    return torch.optim.AdamW(groups, lr=HEAD_LR, weight_decay=WEIGHT_DECAY)


def linear_warmup_decay(total, warmup):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return max(0.0, (total - step) / max(1, total - warmup))
    return f


def build_classifier(encoder=None):
    torch.manual_seed(SEED)
    if encoder is None:
        encoder = Encoder()
    torch.manual_seed(SEED + 1)
    return TicketClassifier(encoder, NUM_CLASSES)


def make_target():
    _, (xs, ys), _ = build_data()
    model = build_classifier()     # note: encoder not pretrained here (that is a training run)
    g = torch.Generator().manual_seed(SEED)
    data = []
    for b in iterate(xs, ys, FT_BS, True, g):
        data.append(b)
        if len(data) == 10:
            break
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_CLASSES,
        "task": "classification",
    }


# ----------------------------------------------------------------------------- train
def pretrain(encoder, routed):
    """Auxiliary pretraining: predict the routing queue of historical tickets from [CLS]."""
    xs, queues = routed
    net = QueueRouter(encoder, len(QUEUES))
    opt = torch.optim.AdamW(net.parameters(), lr=PRETRAIN_LR, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(PRETRAIN_STEPS, 25))
    g = torch.Generator().manual_seed(SEED + 100)
    print(f"[pretrain] queue routing on {len(xs)} historical tickets "
          f"({len(QUEUES)} queues), {PRETRAIN_STEPS} steps, bs={PRETRAIN_BS}")
    step, run_loss, run_acc, n = 0, 0.0, 0.0, 0
    t0 = time.time()
    while step < PRETRAIN_STEPS:
        for b in iterate(xs, queues, PRETRAIN_BS, True, g):
            logits = net(b["input_ids"])
            loss = F.cross_entropy(logits, b["labels"])
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), CLIP)
            opt.step()
            sched.step()
            step += 1
            run_acc += (logits.argmax(-1) == b["labels"]).float().mean().item()
            run_loss += loss.item()
            n += 1
            if step % 50 == 0:
                print(f"[pretrain] step {step:4d}/{PRETRAIN_STEPS}  loss={run_loss / n:.4f}  "
                      f"acc={run_acc / n:.3f}  lr={sched.get_last_lr()[0]:.2e}  ({time.time() - t0:.1f}s)")
                run_loss, run_acc, n = 0.0, 0.0, 0
            if step >= PRETRAIN_STEPS:
                break
    return encoder


@torch.no_grad()
def evaluate(model, xs, ys):
    model.eval()
    tot, correct = 0.0, 0
    for b in iterate(xs, ys, 200, False):
        logits = model(b["input_ids"])
        tot += F.cross_entropy(logits, b["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == b["labels"]).sum().item()
    model.train()
    return tot / len(xs), correct / len(xs)


def bar(i, n, width=10):
    k = int(width * i / n)
    return "\u2588" * k + " " * (width - k)


def main():
    routed, (xs, ys), (vx, vy) = build_data()
    torch.manual_seed(SEED)
    encoder = pretrain(Encoder(), routed)

    model = build_classifier(encoder)
    model.train()
    opt = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(len(xs) / FT_BS)
    total = steps_per_epoch * FT_EPOCHS
    sched = torch.optim.lr_scheduler.LambdaLR(opt, linear_warmup_decay(total, int(WARMUP_FRAC * total)))

    n_enc = sum(p.numel() for p in model.encoder.parameters())
    n_head = sum(p.numel() for p in model.classifier.parameters())
    print()
    print("  | Name       | Type             | Params")
    print("-----------------------------------------------")
    print(f"0 | encoder    | Encoder          | {n_enc / 1e3:.1f} K")
    print(f"1 | dropout    | Dropout          | 0")
    print(f"2 | classifier | Linear           | {n_head}")
    print("-----------------------------------------------")
    print(f"param groups: encoder lr={BACKBONE_LR:g}, head lr={HEAD_LR:g}; {total} steps, warmup {int(WARMUP_FRAC * total)}")

    val_loss, val_acc = evaluate(model, vx, vy)
    print(f"Sanity check: val_loss={val_loss:.3f}, val_acc={val_acc:.3f}")
    g = torch.Generator().manual_seed(SEED)
    t0 = time.time()
    for epoch in range(FT_EPOCHS):
        te = time.time()
        ep_loss, nb = 0.0, 0
        for batch in iterate(xs, ys, FT_BS, True, g):
            loss = loss_fn(model, batch)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            sched.step()
            ep_loss += loss.item()
            nb += 1
        val_loss, val_acc = evaluate(model, vx, vy)
        dt = time.time() - te
        print(f"Epoch {epoch}: 100%|{bar(nb, steps_per_epoch)}| {nb}/{steps_per_epoch} "
              f"[00:{dt:04.1f}, {nb / dt:.2f}it/s, v_num=0, train_loss={ep_loss / nb:.3f}, "
              f"val_loss={val_loss:.3f}, val_acc={val_acc:.3f}]")
    print(f"`Trainer.fit` stopped: `max_epochs={FT_EPOCHS}` reached. ({time.time() - t0:.1f}s)")


if __name__ == "__main__":
    main()
