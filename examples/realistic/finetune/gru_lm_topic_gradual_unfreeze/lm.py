import torch.nn as nn

from corpus import VOCAB_SIZE


class GRUEncoder(nn.Module):
    def __init__(self, vocab_size=VOCAB_SIZE, d_emb=32, d_hidden=96):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, d_emb)
        self.rnn = nn.GRU(d_emb, d_hidden, batch_first=True)
        self.d_hidden = d_hidden

    def forward(self, tokens):
        out, _ = self.rnn(self.embed(tokens))
        return out  # [B, T, H]


class GRULanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = GRUEncoder()
        self.lm_head = nn.Linear(self.encoder.d_hidden, VOCAB_SIZE)

    def forward(self, tokens):
        return self.lm_head(self.encoder(tokens))
