"""Route support tickets to one of five queues with a frozen pretrained encoder.

The encoder (backbone.pt) was pretrained by pretrain.py on fine-grained ticket
topics. Here it is frozen and only a freshly initialised classification head is
trained, with linear warmup + linear decay, HF-Trainer style logging.
"""
import math
import os
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
BACKBONE_PATH = os.path.join(HERE, "backbone.pt")

TOPIC_WORDS = {
    "billing": ["invoice", "charged", "charge", "payment", "card", "bill", "vat", "receipt"],
    "refund": ["refund", "money", "back", "reimburse", "credit", "chargeback", "return_funds", "owed"],
    "login": ["login", "sign", "locked", "account", "2fa", "code", "session", "sso"],
    "password": ["password", "reset", "forgot", "link", "expired", "email_link", "change", "pin"],
    "shipping": ["parcel", "delivery", "courier", "tracking", "shipped", "late", "address", "dispatch"],
    "returns": ["return", "label", "exchange", "damaged", "wrong_item", "rma", "broken", "size"],
    "crash": ["crash", "freezes", "error", "bug", "update", "android", "ios", "blank_screen"],
    "feature": ["feature", "suggest", "wish", "dark_mode", "export", "integration", "would_love", "roadmap"],
}
TOPICS = sorted(TOPIC_WORDS)
QUEUE_OF_TOPIC = {"billing": "finance", "refund": "finance", "login": "identity", "password": "identity",
                  "shipping": "logistics", "returns": "logistics", "crash": "engineering", "feature": "product"}
QUEUES = sorted(set(QUEUE_OF_TOPIC.values()))
FILLER = ["hi", "hello", "please", "help", "i", "my", "the", "a", "is", "not", "it", "can", "you", "thanks",
          "again", "today", "since", "yesterday", "order", "app", "still", "and", "why", "urgent", "asap",
          "need", "this", "with", "for", "no", "have", "been", "waiting", "team", "support"]
PAD, UNK = "<pad>", "<unk>"
VOCAB = [PAD, UNK] + sorted(set(FILLER) | {w for ws in TOPIC_WORDS.values() for w in ws})
STOI = {w: i for i, w in enumerate(VOCAB)}
MAX_LEN = 32


def synth_tickets(n, seed, label_noise=0.0):
    """Returns (token ids [n, MAX_LEN], topic ids [n], queue ids [n])."""
    rng = random.Random(seed)
    ids = torch.zeros(n, MAX_LEN, dtype=torch.long)
    topics, queues = [], []
    for i in range(n):
        topic = rng.choice(TOPICS)
        length = rng.randint(10, MAX_LEN)
        words = []
        for _ in range(length):
            r = rng.random()
            if r < 0.22:
                words.append(rng.choice(TOPIC_WORDS[topic]))
            elif r < 0.30:
                words.append(rng.choice(TOPIC_WORDS[rng.choice(TOPICS)]))
            else:
                words.append(rng.choice(FILLER))
        ids[i, :length] = torch.tensor([STOI.get(w, 1) for w in words])
        q = QUEUES.index(QUEUE_OF_TOPIC[topic])
        if rng.random() < label_noise:
            q = rng.randrange(len(QUEUES))
        topics.append(TOPICS.index(topic))
        queues.append(q)
    return ids, torch.tensor(topics), torch.tensor(queues)


class TicketEncoder(nn.Module):
    def __init__(self, vocab_size=len(VOCAB), emb=48, hidden=96):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, emb, padding_idx=0)
        self.conv1 = nn.Conv1d(emb, hidden, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(hidden, hidden, kernel_size=3, padding=1)
        self.norm = nn.LayerNorm(hidden)
        self.hidden_size = hidden

    def forward(self, input_ids):
        mask = (input_ids != 0).unsqueeze(1).float()
        h = self.embed(input_ids).transpose(1, 2)
        h = F.gelu(self.conv1(h)) * mask
        h = F.gelu(self.conv2(h)) * mask
        pooled = h.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return self.norm(pooled)


class QueueClassifier(nn.Module):
    def __init__(self, encoder, num_labels):
        super().__init__()
        self.encoder = encoder
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(encoder.hidden_size, num_labels)

    def forward(self, input_ids):
        return self.classifier(self.dropout(self.encoder(input_ids)))


# ---------------------------------------------------------------- training args
SEED = 42
NUM_TRAIN_EPOCHS = 3
TRAIN_BATCH_SIZE = 32
EVAL_BATCH_SIZE = 128
LEARNING_RATE = 2e-3
WEIGHT_DECAY = 0.01
WARMUP_RATIO = 0.1
LOGGING_STEPS = 10
MAX_GRAD_NORM = 1.0


def build_model():
    encoder = TicketEncoder()
    encoder.load_state_dict(torch.load(BACKBONE_PATH, map_location="cpu"))
    for p in encoder.parameters():
        p.requires_grad_(False)
    return QueueClassifier(encoder, num_labels=len(QUEUES))


def load_splits():
    train_x, _, train_y = synth_tickets(2400, seed=101, label_noise=0.06)
    eval_x, _, eval_y = synth_tickets(600, seed=202, label_noise=0.06)
    return (train_x, train_y), (eval_x, eval_y)


def compute_loss(model, batch):
    input_ids, labels = batch
    logits = model(input_ids)
    return F.cross_entropy(logits, labels)


def make_optimizer(params):
    params = [p for p in params if p.requires_grad]
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY},
                              {"params": no_decay, "weight_decay": 0.0}], lr=LEARNING_RATE)


def linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(step):
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - step) / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def batches(x, y, batch_size, shuffle, gen=None):
    idx = torch.randperm(len(x), generator=gen) if shuffle else torch.arange(len(x))
    for s in range(0, len(x), batch_size):
        j = idx[s:s + batch_size]
        yield x[j], y[j]


@torch.no_grad()
def evaluate(model, eval_set, epoch):
    model.eval()
    t0 = time.time()
    losses, correct, n = 0.0, 0, 0
    for xb, yb in batches(*eval_set, EVAL_BATCH_SIZE, shuffle=False):
        logits = model(xb)
        losses += F.cross_entropy(logits, yb, reduction="sum").item()
        correct += (logits.argmax(-1) == yb).sum().item()
        n += len(yb)
    rt = time.time() - t0
    model.train()
    return {"eval_loss": round(losses / n, 4), "eval_accuracy": round(correct / n, 4),
            "eval_runtime": round(rt, 4), "eval_samples_per_second": round(n / rt, 3),
            "eval_steps_per_second": round(math.ceil(n / EVAL_BATCH_SIZE) / rt, 3), "epoch": float(epoch)}


def make_target():
    torch.manual_seed(SEED)
    model = build_model()
    (train_x, train_y), _ = load_splits()
    g = torch.Generator().manual_seed(SEED)
    it = batches(train_x, train_y, TRAIN_BATCH_SIZE, shuffle=True, gen=g)
    data = [next(it) for _ in range(3)]
    return {
        "model": model,
        "batch": data[0],
        "data": data,
        "loss_fn": compute_loss,
        "optimizer": make_optimizer(model.parameters()),
        "make_optimizer": make_optimizer,
        "num_classes": len(QUEUES),
        "task": "classification",
    }


def main():
    torch.manual_seed(SEED)
    model = build_model()
    train_set, eval_set = load_splits()
    steps_per_epoch = math.ceil(len(train_set[0]) / TRAIN_BATCH_SIZE)
    max_steps = steps_per_epoch * NUM_TRAIN_EPOCHS
    optimizer = make_optimizer(model.parameters())
    scheduler = linear_schedule_with_warmup(optimizer, int(WARMUP_RATIO * max_steps), max_steps)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    n_total = sum(p.numel() for p in model.parameters())

    print("***** Running training *****")
    print(f"  Num examples = {len(train_set[0]):,}")
    print(f"  Num Epochs = {NUM_TRAIN_EPOCHS:,}")
    print(f"  Instantaneous batch size per device = {TRAIN_BATCH_SIZE:,}")
    print(f"  Total optimization steps = {max_steps:,}")
    print(f"  Number of trainable parameters = {n_trainable:,} (of {n_total:,})")

    g = torch.Generator().manual_seed(SEED)
    model.train()
    global_step, running, n_running = 0, 0.0, 0
    total_loss = 0.0
    t_start = time.time()
    for epoch in range(NUM_TRAIN_EPOCHS):
        for batch in batches(*train_set, TRAIN_BATCH_SIZE, shuffle=True, gen=g):
            loss = compute_loss(model, batch)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(
                [p for p in model.parameters() if p.requires_grad], MAX_GRAD_NORM)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            global_step += 1
            running += loss.item()
            total_loss += loss.item()
            n_running += 1
            if global_step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4), "grad_norm": round(grad_norm.item(), 4),
                       "learning_rate": scheduler.get_last_lr()[0],
                       "epoch": round(global_step / steps_per_epoch, 4)})
                running, n_running = 0.0, 0
        print(evaluate(model, eval_set, epoch + 1))
    rt = time.time() - t_start
    print({"train_runtime": round(rt, 4), "train_samples_per_second": round(len(train_set[0]) * NUM_TRAIN_EPOCHS / rt, 3),
           "train_steps_per_second": round(max_steps / rt, 3), "train_loss": total_loss / global_step,
           "epoch": float(NUM_TRAIN_EPOCHS)})


if __name__ == "__main__":
    main()
