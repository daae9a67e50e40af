"""Route support tickets to one of 8 queues with a tiny BERT-style encoder.

1. Pretrain a 2-layer encoder with masked-language modelling on an unlabeled ticket
   corpus (cached in mlm_encoder.pt).
2. Fine-tune encoder + new classification head on a small labeled set
   (AdamW, linear warmup/decay, [CLS] pooling).
"""
import math
import os
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

HERE = os.path.dirname(os.path.abspath(__file__))
CKPT_PATH = os.path.join(HERE, "mlm_encoder.pt")
SEED = 7

PAD, CLS, MASK = 0, 1, 2
N_SPECIAL = 3
N_FUNCTION_WORDS = 20
N_TOPICS = 16            # fine-grained product areas seen in the corpus
WORDS_PER_TOPIC = 12
NUM_LABELS = 8           # routing queues, each queue owns two product areas
MAX_LEN = 32

N_UNLABELED = 4000
PRETRAIN_EPOCHS = 5
N_TRAIN = 160
N_VAL = 800

BATCH_SIZE = 16
NUM_EPOCHS = 10
LEARNING_RATE = 1e-3
WARMUP_RATIO = 0.1
WEIGHT_DECAY = 0.01
LOGGING_STEPS = 10


@dataclass
class EncoderConfig:
    vocab_size: int = N_SPECIAL + N_FUNCTION_WORDS + N_TOPICS * WORDS_PER_TOPIC
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_position: int = MAX_LEN
    dropout: float = 0.1
    initializer_range: float = 0.02


# ----------------------------------------------------------------------------
# synthetic corpus
# ----------------------------------------------------------------------------
def topic_word_ids(topic):
    start = N_SPECIAL + N_FUNCTION_WORDS + topic * WORDS_PER_TOPIC
    return np.arange(start, start + WORDS_PER_TOPIC)


def generate_tickets(n, rng):
    """Each ticket: [CLS] + a mix of function words and product-area words.

    The main product area contributes most content words, a secondary one some
    noise. Length varies, the rest is padded.
    """
    ids = np.full((n, MAX_LEN), PAD, dtype=np.int64)
    topics = rng.integers(0, N_TOPICS, size=n)
    for i in range(n):
        length = rng.integers(12, MAX_LEN + 1)
        other = rng.integers(0, N_TOPICS)
        toks = [CLS]
        for _ in range(length - 1):
            r = rng.random()
            if r < 0.35:
                toks.append(N_SPECIAL + rng.integers(0, N_FUNCTION_WORDS))
            elif r < 0.85:
                toks.append(rng.choice(topic_word_ids(topics[i])))
            else:
                toks.append(rng.choice(topic_word_ids(other)))
        ids[i, :length] = toks
    return ids, topics


def load_labeled_splits():
    rng = np.random.default_rng(SEED + 1)
    xtr, ttr = generate_tickets(N_TRAIN, rng)
    xva, tva = generate_tickets(N_VAL, rng)
    queue_of_topic = np.random.default_rng(99).permutation(N_TOPICS) % NUM_LABELS
    return (torch.from_numpy(xtr), torch.from_numpy(queue_of_topic[ttr])), \
           (torch.from_numpy(xva), torch.from_numpy(queue_of_topic[tva]))


def collate(input_ids, labels):
    return {"input_ids": input_ids, "attention_mask": (input_ids != PAD).long(), "labels": labels}


def train_dataloader(x, y, generator):
    order = torch.randperm(len(y), generator=generator)
    for i in range(0, len(y), BATCH_SIZE):
        idx = order[i:i + BATCH_SIZE]
        yield collate(x[idx], y[idx])


def eval_dataloader(x, y, batch_size=200):
    for i in range(0, len(y), batch_size):
        yield collate(x[i:i + batch_size], y[i:i + batch_size])


def mask_tokens(input_ids, generator, mlm_probability=0.15):
    labels = input_ids.clone()
    special = input_ids < N_SPECIAL
    prob = torch.full(input_ids.shape, mlm_probability)
    prob[special] = 0.0
    masked = torch.bernoulli(prob, generator=generator).bool()
    labels[~masked] = -100
    inputs = input_ids.clone()
    replace = torch.bernoulli(torch.full(input_ids.shape, 0.8), generator=generator).bool() & masked
    inputs[replace] = MASK
    rand = torch.bernoulli(torch.full(input_ids.shape, 0.5), generator=generator).bool() & masked & ~replace
    inputs[rand] = torch.randint(N_SPECIAL, EncoderConfig.vocab_size, input_ids.shape, generator=generator)[rand]
    return inputs, labels


# ----------------------------------------------------------------------------
# model
# ----------------------------------------------------------------------------
class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_heads = cfg.num_heads
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.out = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h, attention_mask):
        B, T, D = h.shape
        q, k, v = self.qkv(h).split(D, dim=-1)
        q, k, v = (t.view(B, T, self.n_heads, D // self.n_heads).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(D // self.n_heads)
        scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        att = self.drop(scores.softmax(-1))
        return self.out((att @ v).transpose(1, 2).reshape(B, T, D))


class EncoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.attn = SelfAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg.hidden_size)
        self.ffn = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.intermediate_size), nn.GELU(),
                                 nn.Linear(cfg.intermediate_size, cfg.hidden_size))
        self.ln2 = nn.LayerNorm(cfg.hidden_size)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, h, attention_mask):
        h = self.ln1(h + self.drop(self.attn(h, attention_mask)))
        return self.ln2(h + self.drop(self.ffn(h)))


class PreTrainedModule(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.config = cfg

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(mean=0.0, std=self.config.initializer_range)
            if module.padding_idx is not None:
                module.weight.data[module.padding_idx].zero_()
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()

    def post_init(self):
        self.apply(self._init_weights)


class TinyBertEncoder(PreTrainedModule):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.hidden_size, padding_idx=PAD)
        self.pos_emb = nn.Embedding(cfg.max_position, cfg.hidden_size)
        self.emb_ln = nn.LayerNorm(cfg.hidden_size)
        self.emb_drop = nn.Dropout(cfg.dropout)
        self.layers = nn.ModuleList([EncoderLayer(cfg) for _ in range(cfg.num_layers)])
        self.post_init()

    def forward(self, input_ids, attention_mask):
        pos = torch.arange(input_ids.shape[1], device=input_ids.device)
        h = self.emb_drop(self.emb_ln(self.tok_emb(input_ids) + self.pos_emb(pos)))
        for layer in self.layers:
            h = layer(h, attention_mask)
        return h


class TinyBertForMaskedLM(PreTrainedModule):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.encoder = TinyBertEncoder(cfg)
        self.lm_head = nn.Sequential(nn.Linear(cfg.hidden_size, cfg.hidden_size), nn.GELU(),
                                     nn.LayerNorm(cfg.hidden_size), nn.Linear(cfg.hidden_size, cfg.vocab_size))
        self.post_init()

    def forward(self, input_ids, attention_mask):
        return self.lm_head(self.encoder(input_ids, attention_mask))


class TinyBertForSequenceClassification(PreTrainedModule):
    def __init__(self, encoder, num_labels):
        super().__init__(encoder.config)
        self.encoder = encoder
        self.pooler = nn.Sequential(nn.Linear(self.config.hidden_size, self.config.hidden_size), nn.Tanh())
        self.dropout = nn.Dropout(self.config.dropout)
        self.classifier = nn.Linear(self.config.hidden_size, num_labels)
        self.pooler.apply(self._init_weights)
        self.classifier.apply(self._init_weights)

    def forward(self, input_ids, attention_mask):
        h = self.encoder(input_ids, attention_mask)
        return self.classifier(self.dropout(self.pooler(h[:, 0])))


# ----------------------------------------------------------------------------
# MLM pretraining
# ----------------------------------------------------------------------------
def pretrain_mlm():
    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    corpus, _ = generate_tickets(N_UNLABELED, rng)
    corpus = torch.from_numpy(corpus)
    model = TinyBertForMaskedLM(EncoderConfig())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    g = torch.Generator().manual_seed(SEED)
    step = 0
    model.train()
    for epoch in range(PRETRAIN_EPOCHS):
        order = torch.randperm(len(corpus), generator=g)
        for i in range(0, len(corpus), 64):
            ids = corpus[order[i:i + 64]]
            inputs, labels = mask_tokens(ids, g)
            logits = model(inputs, (ids != PAD).long())
            loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step % 50 == 0:
                print(f"[mlm] step {step}: loss {loss.item():.4f}")
    torch.save(model.encoder.state_dict(), CKPT_PATH)
    print(f"[mlm] saved encoder weights to {os.path.basename(CKPT_PATH)}")


def from_pretrained():
    if not os.path.exists(CKPT_PATH):
        pretrain_mlm()
    encoder = TinyBertEncoder(EncoderConfig())
    encoder.load_state_dict(torch.load(CKPT_PATH, map_location="cpu"))
    return encoder


# ----------------------------------------------------------------------------
# fine-tuning
# ----------------------------------------------------------------------------
def build_model():
    encoder = from_pretrained()
    torch.manual_seed(SEED + 2)
    return TinyBertForSequenceClassification(encoder, NUM_LABELS)


def make_optimizer(params):
    return torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=WEIGHT_DECAY)


def grouped_parameters(model):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (no_decay if (n.endswith("bias") or "ln" in n or "emb_ln" in n) else decay).append(p)
    return [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}]


def linear_schedule_with_warmup(optimizer, warmup_steps, total_steps):
    def lr_lambda(step):
        if step < warmup_steps:
            return step / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def loss_fn(model, batch):
    logits = model(batch["input_ids"], batch["attention_mask"])
    return F.cross_entropy(logits, batch["labels"])


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    tot, correct = 0.0, 0
    for batch in eval_dataloader(x, y):
        logits = model(batch["input_ids"], batch["attention_mask"])
        tot += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
        correct += (logits.argmax(-1) == batch["labels"]).sum().item()
    model.train()
    return tot / len(y), correct / len(y)


def make_target():
    model = build_model()
    (xtr, ytr), _ = load_labeled_splits()
    g = torch.Generator().manual_seed(SEED)
    data = [b for _, b in zip(range(5), train_dataloader(xtr, ytr, g))]
    return {
        "model": model,
        "data": data,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": NUM_LABELS,
        "task": "classification",
    }


def main():
    t0 = time.time()
    model = build_model()
    (xtr, ytr), (xva, yva) = load_labeled_splits()
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    total_steps = steps_per_epoch * NUM_EPOCHS
    optimizer = make_optimizer(grouped_parameters(model))
    scheduler = linear_schedule_with_warmup(optimizer, int(WARMUP_RATIO * total_steps), total_steps)
    print("***** Running training *****")
    print(f"  Num examples = {N_TRAIN}")
    print(f"  Num Epochs = {NUM_EPOCHS}")
    print(f"  Instantaneous batch size per device = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")

    g = torch.Generator().manual_seed(SEED)
    model.train()
    step, running, n_running = 0, 0.0, 0
    for epoch in range(NUM_EPOCHS):
        for batch in train_dataloader(xtr, ytr, g):
            loss = loss_fn(model, batch)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            running += loss.item()
            n_running += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_running, 4), "learning_rate": float(f"{scheduler.get_last_lr()[0]:.4e}"),
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_running = 0.0, 0
        val_loss, val_acc = evaluate(model, xva, yva)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_steps_per_second": round(total_steps / runtime, 3), "epoch": float(NUM_EPOCHS)})


if __name__ == "__main__":
    main()
