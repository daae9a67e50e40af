"""Next-token LM pretraining of the GRU encoder on unlabeled documents. Saves encoder_lm.pt."""
import time

import torch
import torch.nn.functional as F

from corpus import VOCAB_SIZE, make_docs
from lm import GRULanguageModel

torch.manual_seed(0)
torch.set_num_threads(2)
toks, _ = make_docs(6000, seed=5)  # topic ids are discarded
toks = torch.from_numpy(toks)
model = GRULanguageModel()
opt = torch.optim.Adam(model.parameters(), lr=3e-3)
t0 = time.time()
for epoch in range(6):
    perm = torch.randperm(len(toks))
    tot, n = 0.0, 0
    for i in range(0, len(toks), 64):
        xb = toks[perm[i:i + 64]]
        logits = model(xb[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB_SIZE), xb[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        tot += loss.item()
        n += 1
    print(f"lm epoch {epoch + 1}: loss {tot / n:.4f} ({time.time() - t0:.1f}s)")
torch.save(model.encoder.state_dict(), "encoder_lm.pt")
