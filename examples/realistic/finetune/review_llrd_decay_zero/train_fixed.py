"""Fine-tune a small pretrained text encoder for product-review polarity.

Stage 1 (stand-in for loading a checkpoint): pretrain the encoder on product-category
classification. Stage 2: new 2-way head, full fine-tuning with layer-wise lr decay,
Trainer-style dict logging.
"""
import math
import random
import time
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 3

CATEGORIES = {
    "kitchen": ["kettle", "pan", "blender", "knife", "toaster", "mug"],
    "garden": ["hose", "rake", "shovel", "seeds", "planter", "mower"],
    "audio": ["speaker", "headphones", "cable", "amp", "mic", "earbuds"],
    "toys": ["puzzle", "lego", "doll", "kite", "robot", "blocks"],
}
POSITIVE = ["great", "sturdy", "reliable", "lovely", "perfect", "solid"]
NEGATIVE = ["flimsy", "broken", "awful", "noisy", "useless", "cheap"]
NEGATORS = ["not", "never"]
FILLER = ["the", "a", "it", "is", "was", "this", "my", "and", "really", "so", "arrived", "bought",
          "for", "kids", "after", "week", "use", "quite", "very", "with", "box", "order"]

VOCAB = ["[PAD]", "[CLS]"] + sorted(
    {w for ws in CATEGORIES.values() for w in ws} | set(POSITIVE) | set(NEGATIVE) | set(NEGATORS) | set(FILLER))
TOK = {w: i for i, w in enumerate(VOCAB)}
MAX_LEN = 20


def make_review(rng):
    cat = rng.randrange(len(CATEGORIES))
    item = rng.choice(list(CATEGORIES.values())[cat])
    positive = rng.random() < 0.5
    negated = rng.random() < 0.15
    adj = rng.choice(POSITIVE if positive else NEGATIVE)
    words = [rng.choice(FILLER) for _ in range(rng.randint(6, 12))]
    words.insert(rng.randint(0, len(words)), item)
    phrase = [rng.choice(NEGATORS), adj] if negated else [adj]
    pos = rng.randint(0, len(words))
    words[pos:pos] = phrase
    if rng.random() < 0.5:
        words.insert(rng.randint(0, len(words)), rng.choice(list(CATEGORIES.values())[cat]))
    label = int(positive != negated)
    return words[:MAX_LEN - 1], cat, label


def encode(words):
    ids = [TOK["[CLS]"]] + [TOK[w] for w in words]
    return ids + [TOK["[PAD]"]] * (MAX_LEN - len(ids))


def make_dataset(n, seed):
    rng = random.Random(seed)
    rows = [make_review(rng) for _ in range(n)]
    ids = torch.tensor([encode(w) for w, _, _ in rows])
    cats = torch.tensor([c for _, c, _ in rows])
    labels = torch.tensor([y for _, _, y in rows])
    return ids, cats, labels


class TinyEncoder(nn.Module):
    def __init__(self, vocab_size=len(VOCAB), d_model=64, n_layers=2, n_heads=4):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.position = nn.Embedding(MAX_LEN, d_model)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=128, dropout=0.1,
                                       batch_first=True, norm_first=True)
            for _ in range(n_layers)
        ])
        self.norm = nn.LayerNorm(d_model)

    def forward(self, input_ids):
        pad = input_ids == 0
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        h = self.embeddings(input_ids) + self.position(pos)
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=pad)
        h = self.norm(h)
        keep = (~pad).unsqueeze(-1).float()
        return (h * keep).sum(1) / keep.sum(1)


class Classifier(nn.Module):
    def __init__(self, encoder, num_labels):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(encoder.norm.normalized_shape[0], num_labels)

    def forward(self, input_ids):
        return self.classifier(self.dropout(self.encoder(input_ids)))


def pretrain_encoder(steps=250):
    """Stand-in for from_pretrained(): category classification on a separate corpus."""
    torch.manual_seed(SEED)
    ids, cats, _ = make_dataset(6000, seed=100)
    model = Classifier(TinyEncoder(), num_labels=len(CATEGORIES))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    g = torch.Generator().manual_seed(SEED)
    for _ in range(steps):
        idx = torch.randint(0, len(ids), (64,), generator=g)
        loss = F.cross_entropy(model(ids[idx]), cats[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.encoder


@dataclass
class TrainingArguments:
    learning_rate: float = 5e-3
    layer_decay: float = 0.8
    weight_decay: float = 0.01
    head_weight_decay: float = 0.1
    num_train_epochs: int = 6
    per_device_train_batch_size: int = 32
    warmup_ratio: float = 0.1
    max_grad_norm: float = 1.0
    logging_steps: int = 25


args = TrainingArguments()


def layerwise_param_groups(model, args):
    num_layers = len(model.encoder.layers)
    groups = [{
        "params": list(model.classifier.parameters()),
        "lr": args.learning_rate,
        "weight_decay": args.head_weight_decay,
    }]
    depth_of = {"embeddings": 0, "position": 0, "norm": num_layers + 1}
    buckets = {}
    for name, p in model.encoder.named_parameters():
        top = name.split(".")[0]
        depth = int(name.split(".")[1]) + 1 if top == "layers" else depth_of[top]
        buckets.setdefault(depth, []).append(p)
    for depth, params in sorted(buckets.items()):
        scale = args.layer_decay ** (num_layers + 1 - depth)
        groups.append({"params": params, "lr": args.learning_rate * scale, "weight_decay": args.weight_decay})
    for g in groups:
        g["initial_lr"] = g["lr"]
    return groups


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=args.learning_rate, weight_decay=args.weight_decay)


def loss_fn(model, batch):
    input_ids, labels = batch
    return F.cross_entropy(model(input_ids), labels)


def build_model():
    encoder = pretrain_encoder()
    torch.manual_seed(SEED + 1)
    return Classifier(encoder, num_labels=2)


def build_datasets():
    tr_ids, _, tr_y = make_dataset(2400, seed=1)
    ev_ids, _, ev_y = make_dataset(600, seed=2)
    return (tr_ids, tr_y), (ev_ids, ev_y)


def make_target():
    model = build_model()
    (tr_ids, tr_y), _ = build_datasets()
    bs = args.per_device_train_batch_size
    data = [(tr_ids[i * bs:(i + 1) * bs], tr_y[i * bs:(i + 1) * bs]) for i in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": loss_fn,
        "optimizer": torch.optim.AdamW(layerwise_param_groups(model, args)),
        "make_optimizer": make_optimizer,
        "num_classes": 2,
        "task": "classification",
    }


@torch.no_grad()
def evaluate(model, ids, labels):
    model.eval()
    logits = model(ids)
    loss = F.cross_entropy(logits, labels).item()
    acc = (logits.argmax(-1) == labels).float().mean().item()
    model.train()
    return loss, acc


def main():
    t_start = time.time()
    model = build_model()
    (tr_ids, tr_y), (ev_ids, ev_y) = build_datasets()
    optimizer = torch.optim.AdamW(layerwise_param_groups(model, args))
    bs = args.per_device_train_batch_size
    steps_per_epoch = len(tr_ids) // bs
    total_steps = steps_per_epoch * args.num_train_epochs
    warmup = int(args.warmup_ratio * total_steps)

    def lr_lambda(step):
        if step < warmup:
            return step / max(1, warmup)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    print("***** Running training *****")
    print(f"  Num examples = {len(tr_ids)}")
    print(f"  Num Epochs = {args.num_train_epochs}")
    print(f"  Instantaneous batch size per device = {bs}")
    print(f"  Total optimization steps = {total_steps}")
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"  Number of trainable parameters = {n_trainable:,}")

    model.train()
    g = torch.Generator().manual_seed(SEED)
    step = 0
    running, running_n, total_loss = 0.0, 0, 0.0
    for epoch in range(args.num_train_epochs):
        perm = torch.randperm(len(tr_ids), generator=g)
        for i in range(steps_per_epoch):
            idx = perm[i * bs:(i + 1) * bs]
            loss = loss_fn(model, (tr_ids[idx], tr_y[idx]))
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            step += 1
            running += loss.item()
            running_n += 1
            total_loss += loss.item()
            if step % args.logging_steps == 0:
                print({"loss": round(running / running_n, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0], "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        ev_loss, ev_acc = evaluate(model, ev_ids, ev_y)
        print({"eval_loss": round(ev_loss, 4), "eval_accuracy": round(ev_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t_start
    print({"train_runtime": round(runtime, 2),
           "train_samples_per_second": round(total_steps * bs / runtime, 2),
           "train_steps_per_second": round(total_steps / runtime, 2),
           "train_loss": round(total_loss / total_steps, 4), "epoch": float(args.num_train_epochs)})


if __name__ == "__main__":
    main()
