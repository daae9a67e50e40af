"""Fine-tune the pretrained ticket encoder (backbone.pt, see pretrain.py) to route
helpdesk tickets to one of 4 queues. A fresh classification head goes on top of
the mean-pooled encoder output; the backbone is trained at a small LR and the
head at a larger one (discriminative learning rates), AdamW + linear decay."""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))

VOCAB = 160
SEQ_LEN = 32
N_TOPICS = 10
PAD = 0
# topic -> queue (billing, access, hardware, shipping)
TOPIC_TO_QUEUE = [0, 0, 1, 1, 1, 2, 2, 3, 3, 0]
QUEUES = ["billing", "access", "hardware", "shipping"]


def make_tickets(n, seed, label_noise=0.05):
    """Synthetic tickets: each topic owns 10 keywords (ids 40..139), the rest of a
    ticket is filler vocabulary shared by all topics (ids 1..39, 140..159)."""
    rng = np.random.default_rng(seed)
    topics = rng.integers(0, N_TOPICS, size=n)
    filler = np.concatenate([np.arange(1, 40), np.arange(140, VOCAB)])
    x = np.full((n, SEQ_LEN), PAD, dtype=np.int64)
    for i, t in enumerate(topics):
        length = rng.integers(12, SEQ_LEN + 1)
        n_kw = rng.integers(2, 6)
        toks = rng.choice(filler, size=length)
        pos = rng.choice(length, size=n_kw, replace=False)
        kws = 40 + 10 * t + rng.integers(0, 10, size=n_kw)
        # one keyword from a random other topic to make it less trivial
        if rng.random() < 0.5:
            other = rng.integers(0, N_TOPICS)
            kws[0] = 40 + 10 * other + rng.integers(0, 10)
        toks[pos] = kws
        x[i, :length] = toks
    return torch.from_numpy(x), torch.from_numpy(topics)


def queue_labels(topics, seed, label_noise=0.05):
    rng = np.random.default_rng(seed + 1)
    y = np.array(TOPIC_TO_QUEUE)[topics.numpy()]
    flip = rng.random(len(y)) < label_noise
    y[flip] = rng.integers(0, len(QUEUES), size=flip.sum())
    return torch.from_numpy(y)


class TicketEncoder(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=48, n_heads=4, n_layers=2, d_ff=96, max_len=SEQ_LEN):
        super().__init__()
        self.tok = nn.Embedding(vocab, d_model, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.hidden_size = d_model

    def forward(self, ids):
        pad = ids.eq(PAD)
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.tok(ids) + self.pos(pos)
        h = self.layers(h, src_key_padding_mask=pad)
        h = self.norm(h)
        keep = (~pad).unsqueeze(-1).float()
        return (h * keep).sum(1) / keep.sum(1).clamp(min=1.0)


class TicketClassifier(nn.Module):
    def __init__(self, encoder, num_labels, dropout=0.1):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(encoder.hidden_size, num_labels)

    def forward(self, ids):
        return self.classifier(self.dropout(self.encoder(ids)))


@dataclass
class TrainingArgs:
    learning_rate: float = 2e-5      # backbone
    head_lr: float = 1e-3            # new classification head
    weight_decay: float = 0.01
    num_train_epochs: int = 3
    per_device_train_batch_size: int = 32
    warmup_ratio: float = 0.0
    max_grad_norm: float = 1.0
    logging_steps: int = 10
    seed: int = 42


ARGS = TrainingArgs()


def build_model():
    enc = TicketEncoder()
    state = torch.load(os.path.join(HERE, "backbone.pt"), map_location="cpu")
    enc.load_state_dict(state)
    torch.manual_seed(ARGS.seed)
    return TicketClassifier(enc, num_labels=len(QUEUES))


def make_optimizer(model_or_params, args=ARGS):
    if isinstance(model_or_params, nn.Module):
        named = list(model_or_params.named_parameters())
    else:
        named = [(n, p) for n, p in model_or_params]
    backbone = [p for n, p in named if not n.startswith("classifier.")]
    head = [p for n, p in named if n.startswith("classifier.")]
    groups = [
        {"params": backbone, "lr": args.learning_rate},
        {"params": head, "lr": args.learning_rate * args.head_lr},
    ]
    return torch.optim.AdamW(groups, lr=args.learning_rate, weight_decay=args.weight_decay)


def compute_loss(model, batch):
    ids, labels = batch
    logits = model(ids)
    return F.cross_entropy(logits, labels)


def get_data():
    x_tr, t_tr = make_tickets(1600, seed=11)
    x_va, t_va = make_tickets(400, seed=12)
    return (x_tr, queue_labels(t_tr, 11)), (x_va, queue_labels(t_va, 12))


def batches(x, y, bs, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for i in range(0, len(x), bs):
        j = idx[i:i + bs]
        yield x[j], y[j]


@torch.no_grad()
def evaluate(model, x, y, epoch):
    model.eval()
    t0 = time.time()
    losses, correct = [], 0
    for ids, lab in batches(x, y, 128, shuffle=False):
        logits = model(ids)
        losses.append(F.cross_entropy(logits, lab, reduction="sum").item())
        correct += (logits.argmax(-1) == lab).sum().item()
    model.train()
    rt = time.time() - t0
    return {"eval_loss": round(sum(losses) / len(x), 4), "eval_accuracy": round(correct / len(x), 4),
            "eval_runtime": round(rt, 4), "eval_samples_per_second": round(len(x) / rt, 3),
            "epoch": float(epoch)}


def _named_like(model, params):
    """Recover parameter names for a bare iterable of parameters of `model`."""
    params = list(params)
    if params and isinstance(params[0], tuple):
        return params
    names = {id(p): n for n, p in model.named_parameters()}
    if all(id(p) in names for p in params):
        return [(names[id(p)], p) for p in params]
    return [(n, p) for (n, _), p in zip(model.named_parameters(), params)]


def make_target():
    (x_tr, y_tr), _ = get_data()
    model = build_model()
    g = torch.Generator().manual_seed(0)
    data = [b for _, b in zip(range(3), batches(x_tr, y_tr, ARGS.per_device_train_batch_size, True, g))]
    return {"model": model, "batch": data[0], "data": data, "loss_fn": compute_loss,
            "optimizer": make_optimizer(model),
            "make_optimizer": lambda params: make_optimizer(_named_like(model, params)),
            "num_classes": len(QUEUES), "task": "classification"}


def main():
    torch.manual_seed(ARGS.seed)
    (x_tr, y_tr), (x_va, y_va) = get_data()
    model = build_model()
    optimizer = make_optimizer(model)
    steps_per_epoch = math.ceil(len(x_tr) / ARGS.per_device_train_batch_size)
    total_steps = steps_per_epoch * ARGS.num_train_epochs
    warmup = int(ARGS.warmup_ratio * total_steps)

    def lr_lambda(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"***** Running training *****\n  Num examples = {len(x_tr)}\n  Num Epochs = {ARGS.num_train_epochs}\n"
          f"  Total optimization steps = {total_steps}\n  Number of trainable parameters = {n_params}")
    gen = torch.Generator().manual_seed(ARGS.seed)
    step, running, n_run, tr_sum = 0, 0.0, 0, 0.0
    t_start = time.time()
    model.train()
    for epoch in range(ARGS.num_train_epochs):
        for batch in batches(x_tr, y_tr, ARGS.per_device_train_batch_size, True, gen):
            loss = compute_loss(model, batch)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), ARGS.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item(); n_run += 1; tr_sum += loss.item()
            if step % ARGS.logging_steps == 0:
                print({"loss": round(running / n_run, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_run = 0.0, 0
        print(evaluate(model, x_va, y_va, epoch + 1))
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(len(x_tr) * ARGS.num_train_epochs / rt, 3),
           "train_steps_per_second": round(total_steps / rt, 3), "train_loss": round(tr_sum / step, 4),
           "epoch": float(ARGS.num_train_epochs)})


if __name__ == "__main__":
    main()
