"""Topic classification by fine-tuning the LM-pretrained GRU encoder.

Schedule (ULMFiT-style): the encoder is frozen for the first FREEZE_EPOCHS epochs
while the new head warms up, then everything is trained with a lower LR on the encoder.
"""
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from corpus import N_TOPICS, make_docs
from lm import GRUEncoder

CKPT = "encoder_lm.pt"
N_TRAIN, N_VAL = 400, 600
BATCH_SIZE = 32
EPOCHS = 20
FREEZE_EPOCHS = 3
HEAD_LR = 5e-3
ENCODER_LR = 1e-3
WARMUP_STEPS = 20
LABEL_SMOOTHING = 0.1
LOGGING_STEPS = 10


class TopicClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = GRUEncoder()
        self.dropout = nn.Dropout(0.3)
        self.classifier = nn.Linear(self.encoder.d_hidden, N_TOPICS)

    def forward(self, tokens):
        h = self.encoder(tokens).mean(dim=1)
        return self.classifier(self.dropout(h))


def build_model():
    model = TopicClassifier()
    model.encoder.load_state_dict(torch.load(CKPT, map_location="cpu"))
    return model


def load_split(n, seed):
    toks, topics = make_docs(n, seed)
    return torch.from_numpy(toks), torch.from_numpy(topics)


def iterate_batches(x, y, batch_size, generator):
    perm = torch.randperm(len(x), generator=generator)
    for i in range(0, len(x), batch_size):
        idx = perm[i:i + batch_size]
        yield x[idx], y[idx]


def loss_fn(model, batch):
    xb, yb = batch
    return F.cross_entropy(model(xb), yb, label_smoothing=LABEL_SMOOTHING)


def make_optimizer(params):
    params = list(params)
    head = params[-2:]  # classifier.weight, classifier.bias
    head_ids = {id(p) for p in head}
    return torch.optim.AdamW([
        {"params": [p for p in params if id(p) not in head_ids], "lr": ENCODER_LR},
        {"params": head, "lr": HEAD_LR},
    ], weight_decay=0.01)


def set_encoder_trainable(model, flag):
    for p in model.encoder.parameters():
        p.requires_grad = flag


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = model(x)
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def make_target():
    torch.manual_seed(0)
    x_tr, y_tr = load_split(N_TRAIN, seed=41)
    g = torch.Generator().manual_seed(0)
    batches = list(iterate_batches(x_tr, y_tr, BATCH_SIZE, g))[:5]
    return {
        "model": build_model(),
        "data": batches,
        "loss_fn": loss_fn,
        "make_optimizer": make_optimizer,
        "num_classes": N_TOPICS,
        "task": "classification",
    }


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    x_tr, y_tr = load_split(N_TRAIN, seed=41)
    x_va, y_va = load_split(N_VAL, seed=42)
    model = build_model()
    opt = make_optimizer(model.parameters())
    steps_per_epoch = math.ceil(N_TRAIN / BATCH_SIZE)
    total_steps = EPOCHS * steps_per_epoch

    def lr_lambda(step):
        if step < WARMUP_STEPS:
            return (step + 1) / WARMUP_STEPS
        return max(0.0, (total_steps - step) / (total_steps - WARMUP_STEPS))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    print("***** Running training *****")
    print(f"  Num examples = {N_TRAIN}")
    print(f"  Num Epochs = {EPOCHS}")
    print(f"  Batch size = {BATCH_SIZE}")
    print(f"  Total optimization steps = {total_steps}")
    g = torch.Generator().manual_seed(0)
    set_encoder_trainable(model, False)
    t0 = time.time()
    step, running, n_run = 0, 0.0, 0
    for epoch in range(EPOCHS):
        if epoch == FREEZE_EPOCHS:
            set_encoder_trainable(model, True)
            n = sum(p.numel() for p in model.parameters() if p.requires_grad)
            print(f"Unfreezing encoder at epoch {epoch}: {n} trainable parameters")
        for xb, yb in iterate_batches(x_tr, y_tr, BATCH_SIZE, g):
            loss = loss_fn(model, (xb, yb))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            running += loss.item()
            n_run += 1
            if step % LOGGING_STEPS == 0:
                print({"loss": round(running / n_run, 4), "learning_rate": sched.get_last_lr()[1],
                       "epoch": round(step / steps_per_epoch, 2)})
                running, n_run = 0.0, 0
        val_loss, val_acc = evaluate(model, x_va, y_va)
        print({"eval_loss": round(val_loss, 4), "eval_accuracy": round(val_acc, 4), "epoch": float(epoch + 1)})
    runtime = time.time() - t0
    print({"train_runtime": round(runtime, 2), "train_samples_per_second": round(EPOCHS * N_TRAIN / runtime, 1),
           "epoch": float(EPOCHS)})


if __name__ == "__main__":
    main()
