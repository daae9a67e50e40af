"""Pretrain the small ingredient encoder on cuisine classification; writes encoder.pt."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from recipe_data import sample_recipes, VOCAB, MAX_LEN, N_CUISINES, PAD


class IngredientEncoder(nn.Module):
    def __init__(self, vocab=VOCAB, d=48, n_layers=2, n_heads=4, max_len=MAX_LEN):
        super().__init__()
        self.tok = nn.Embedding(vocab, d, padding_idx=PAD)
        self.pos = nn.Embedding(max_len, d)
        layer = nn.TransformerEncoderLayer(d, n_heads, dim_feedforward=2 * d, dropout=0.1,
                                           batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.hidden_size = d

    def forward(self, ids):
        pad = ids.eq(PAD)
        pos = torch.arange(ids.size(1), device=ids.device)
        h = self.tok(ids) + self.pos(pos)[None]
        h = self.layers(h, src_key_padding_mask=pad)
        return self.norm(h[:, 0])          # CLS pooling


def main():
    torch.manual_seed(0)
    ids, cuisine, _ = sample_recipes(12000, seed=101)
    ids, cuisine = torch.from_numpy(ids), torch.from_numpy(cuisine)
    enc = IngredientEncoder()
    head = nn.Linear(enc.hidden_size, N_CUISINES)
    opt = torch.optim.AdamW(list(enc.parameters()) + list(head.parameters()), lr=2e-3, weight_decay=0.01)
    for epoch in range(6):
        perm = torch.randperm(len(ids))
        tot = 0.0
        for s in range(0, len(ids), 64):
            b = perm[s:s + 64]
            loss = F.cross_entropy(head(enc(ids[b])), cuisine[b])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item() * len(b)
        print(f"pretrain epoch {epoch} loss {tot / len(ids):.4f}")
    enc.eval()
    vid, vc, _ = sample_recipes(2000, seed=202)
    with torch.no_grad():
        acc = (head(enc(torch.from_numpy(vid))).argmax(-1) == torch.from_numpy(vc)).float().mean()
    print(f"cuisine val acc {acc:.3f}")
    sd = {k: v.half() for k, v in enc.state_dict().items()}
    torch.save(sd, "encoder.pt")


if __name__ == "__main__":
    main()
