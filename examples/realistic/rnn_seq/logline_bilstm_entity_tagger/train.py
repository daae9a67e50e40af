"""BiLSTM token tagger that pulls entities (user, ip, port, pid, host, path) out of
raw log lines. Word embedding + word-shape embedding -> 1-layer BiLSTM -> per-token
softmax. Lines are padded per batch; padded positions carry label -100.
"""
import random
import re
import time
from collections import Counter

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

SEED = 2024
N_TRAIN, N_VAL = 1600, 400
MIN_FREQ = 3
BATCH_SIZE = 32
NUM_EPOCHS = 6
LR = 3e-3
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01
LOGGING_STEPS = 25
EMB_DIM, SHAPE_DIM, HIDDEN = 64, 16, 96
DROPOUT = 0.5
MISSED_SPAN_RATE = 0.03

TAGS = ["O", "USER", "IP", "PORT", "PID", "HOST", "PATH"]
TAG2ID = {t: i for i, t in enumerate(TAGS)}
PAD_ID, UNK_ID = 0, 1

# ---------------------------------------------------------------------------
# synthetic log lines with token-level annotation

FIRST = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi", "ivan", "judy",
         "mallory", "oscar", "peggy", "trent", "victor", "walter", "deploy", "jenkins", "backup", "svc_etl"]
HOSTS = ["web01", "web02", "web03", "db-primary", "db-replica", "cache01", "ci-runner-4", "bastion", "kafka-2", "edge-lb"]
DIRS = ["/var/log", "/etc/nginx", "/home/{u}", "/opt/app/releases", "/srv/data", "/tmp"]
FILES = ["app.log", "nginx.conf", "id_rsa.pub", "dump.sql", "config.yaml", "report.csv"]


def _user(rng):
    # long tail of user names so a good share are unseen at validation time
    if rng.random() < 0.4:
        return f"{rng.choice(FIRST)}{rng.randint(1, 999)}"
    return rng.choice(FIRST)


def _ip(rng):
    return f"{rng.choice([10, 172, 192])}.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"


def _path(rng, user):
    return rng.choice(DIRS).format(u=user) + "/" + rng.choice(FILES)


def make_line(rng):
    """Returns a list of (token, tag) pairs."""
    host = (rng.choice(HOSTS), "HOST")
    pid = (str(rng.randint(100, 65000)), "PID")
    user = _user(rng)
    daemon = rng.choice(["sshd", "sudo", "rsync", "nginx", "cron"])
    head = [(rng.choice(["Jan", "Feb", "Mar", "Apr"]), "O"), (str(rng.randint(1, 28)), "O"),
            (f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}", "O"),
            host, (daemon, "O"), ("[", "O"), pid, ("]", "O"), (":", "O")]
    if daemon == "sshd":
        verb = rng.choice(["Accepted password for", "Failed password for", "Invalid user"])
        body = [(w, "O") for w in verb.split()] + [(user, "USER"), ("from", "O"), (_ip(rng), "IP"),
                                                    ("port", "O"), (str(rng.randint(1024, 65535)), "PORT")]
        if rng.random() < 0.5:
            body.append(("ssh2", "O"))
    elif daemon == "sudo":
        body = [(user, "USER"), (":", "O"), ("COMMAND=", "O"), (_path(rng, user), "PATH")]
    elif daemon == "rsync":
        body = [("sent", "O"), (str(rng.randint(10, 99999)), "O"), ("bytes", "O"), ("to", "O"),
                (rng.choice(HOSTS), "HOST"), (":", "O"), (_path(rng, user), "PATH")]
    elif daemon == "nginx":
        body = [(_ip(rng), "IP"), ("-", "O"), (user if rng.random() < 0.5 else "-", "USER"),
                ("GET", "O"), (rng.choice(["/", "/api/health", "/login", "/static/app.js"]), "O"),
                (str(rng.choice([200, 301, 404, 502])), "O")]
        if body[2][0] == "-":
            body[2] = ("-", "O")
    else:
        body = [("(", "O"), (user, "USER"), (")", "O"), ("CMD", "O"), (_path(rng, user), "PATH")]
    # annotations come from a regex-assisted labelling pass that misses some spans
    return [(tok, "O" if tag != "O" and rng.random() < MISSED_SPAN_RATE else tag) for tok, tag in head + body]


def word_shape(tok):
    s = re.sub(r"[A-Z]", "X", tok)
    s = re.sub(r"[a-z]", "x", s)
    s = re.sub(r"[0-9]", "d", s)
    return re.sub(r"(.)\1{2,}", r"\1\1", s)  # squash long runs: "ddddd" -> "dd"


def build_data():
    rng = random.Random(SEED)
    lines = [make_line(rng) for _ in range(N_TRAIN + N_VAL)]
    train, val = lines[:N_TRAIN], lines[N_TRAIN:]
    wc = Counter(tok for line in train for tok, _ in line)
    vocab = {"<pad>": PAD_ID, "<unk>": UNK_ID}
    for w, c in wc.most_common():
        if c >= MIN_FREQ:
            vocab[w] = len(vocab)
    shapes = {"<pad>": PAD_ID, "<unk>": UNK_ID}
    for s in sorted({word_shape(tok) for line in train for tok, _ in line}):
        shapes[s] = len(shapes)
    return train, val, vocab, shapes


def encode(line, vocab, shapes):
    toks = [vocab.get(t, UNK_ID) for t, _ in line]
    shp = [shapes.get(word_shape(t), UNK_ID) for t, _ in line]
    tags = [TAG2ID[g] for _, g in line]
    return toks, shp, tags


def collate(examples):
    lengths = torch.tensor([len(e[0]) for e in examples])
    T = int(lengths.max())
    B = len(examples)
    words = torch.full((B, T), PAD_ID, dtype=torch.long)
    shapes = torch.full((B, T), PAD_ID, dtype=torch.long)
    labels = torch.full((B, T), -100, dtype=torch.long)
    for i, (w, s, t) in enumerate(examples):
        n = len(w)
        words[i, :n] = torch.tensor(w)
        shapes[i, :n] = torch.tensor(s)
        labels[i, :n] = torch.tensor(t)
    return {"words": words, "shapes": shapes, "lengths": lengths, "labels": labels}


def batches(encoded, batch_size, shuffle, rng=None):
    idx = list(range(len(encoded)))
    if shuffle:
        rng.shuffle(idx)
    for i in range(0, len(idx), batch_size):
        yield collate([encoded[j] for j in idx[i : i + batch_size]])


# ---------------------------------------------------------------------------
# model

class BiLSTMTagger(nn.Module):
    def __init__(self, vocab_size, n_shapes, n_tags):
        super().__init__()
        self.word_emb = nn.Embedding(vocab_size, EMB_DIM, padding_idx=PAD_ID)
        self.shape_emb = nn.Embedding(n_shapes, SHAPE_DIM, padding_idx=PAD_ID)
        self.dropout = nn.Dropout(DROPOUT)
        self.lstm = nn.LSTM(EMB_DIM + SHAPE_DIM, HIDDEN, batch_first=True, bidirectional=True)
        self.classifier = nn.Linear(2 * HIDDEN, n_tags)

    def forward(self, words, shapes, lengths):
        x = torch.cat([self.word_emb(words), self.shape_emb(shapes)], dim=-1)
        x = self.dropout(x)
        packed = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=words.size(1))
        return self.classifier(self.dropout(out))


def compute_loss(model, batch):
    logits = model(batch["words"], batch["shapes"], batch["lengths"])
    return F.cross_entropy(logits.view(-1, logits.size(-1)), batch["labels"].view(-1), ignore_index=-100)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LR, weight_decay=WEIGHT_DECAY)


def linear_schedule_with_warmup(optimizer, warmup_steps, total_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def build_model(vocab, shapes):
    torch.manual_seed(SEED)
    return BiLSTMTagger(len(vocab), len(shapes), len(TAGS))


@torch.no_grad()
def evaluate(model, encoded):
    model.eval()
    tot_loss, n_tok, correct = 0.0, 0, 0
    tp, fp, fn = 0, 0, 0
    for batch in batches(encoded, 100, shuffle=False):
        logits = model(batch["words"], batch["shapes"], batch["lengths"])
        labels = batch["labels"]
        mask = labels != -100
        tot_loss += F.cross_entropy(logits[mask], labels[mask], reduction="sum").item()
        pred = logits.argmax(-1)
        n_tok += mask.sum().item()
        correct += ((pred == labels) & mask).sum().item()
        ent_pred = (pred != TAG2ID["O"]) & mask
        ent_gold = (labels != TAG2ID["O"]) & mask
        tp += (ent_pred & ent_gold & (pred == labels)).sum().item()
        fp += (ent_pred & (pred != labels)).sum().item()
        fn += (ent_gold & (pred != labels)).sum().item()
    model.train()
    p = tp / max(1, tp + fp)
    r = tp / max(1, tp + fn)
    f1 = 2 * p * r / max(1e-9, p + r)
    return {"eval_loss": round(tot_loss / n_tok, 4), "eval_token_accuracy": round(correct / n_tok, 4),
            "eval_entity_f1": round(f1, 4)}


def make_target():
    train, _, vocab, shapes = build_data()
    enc = [encode(l, vocab, shapes) for l in train]
    data = list(batches(enc, BATCH_SIZE, shuffle=True, rng=random.Random(SEED)))[:5]
    return {
        "model": build_model(vocab, shapes),
        "data": data,
        "loss_fn": compute_loss,
        "make_optimizer": make_optimizer,
        "num_classes": len(TAGS),
        "task": "classification",
    }


def main():
    train, val, vocab, shapes = build_data()
    enc_train = [encode(l, vocab, shapes) for l in train]
    enc_val = [encode(l, vocab, shapes) for l in val]
    model = build_model(vocab, shapes)
    optimizer = make_optimizer(model.parameters())
    steps_per_epoch = (len(enc_train) + BATCH_SIZE - 1) // BATCH_SIZE
    total_steps = steps_per_epoch * NUM_EPOCHS
    scheduler = linear_schedule_with_warmup(optimizer, int(WARMUP_RATIO * total_steps), total_steps)
    print("***** Running training *****")
    print(f"  Num examples = {len(enc_train)}")
    print(f"  Num Epochs = {NUM_EPOCHS}")
    print(f"  Vocab size = {len(vocab)}, word shapes = {len(shapes)}, tags = {len(TAGS)}")
    print(f"  Total optimization steps = {total_steps}")
    print(f"  Number of trainable parameters = {sum(p.numel() for p in model.parameters() if p.requires_grad)}")

    rng = random.Random(SEED)
    step, running, running_n = 0, 0.0, 0
    start = time.time()
    for epoch in range(NUM_EPOCHS):
        for batch in batches(enc_train, BATCH_SIZE, shuffle=True, rng=rng):
            loss = compute_loss(model, batch)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running += loss.item()
            running_n += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / running_n, 4), "learning_rate": float(f"{scheduler.get_last_lr()[0]:.6g}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, running_n = 0.0, 0
        metrics = evaluate(model, enc_val)
        metrics["epoch"] = float(epoch + 1)
        print(metrics)
    runtime = time.time() - start
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(len(enc_train) * NUM_EPOCHS / runtime, 2),
           "train_steps_per_second": round(total_steps / runtime, 3), "epoch": float(NUM_EPOCHS)})


if __name__ == "__main__":
    main()
