import torch.nn as nn


class Encoder(nn.Module):
    def __init__(self, d_in=48, d_hidden=128, d_out=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d_hidden), nn.ReLU(),
            nn.Linear(d_hidden, d_hidden), nn.ReLU(),
            nn.Linear(d_hidden, d_out),
        )

    def forward(self, x):
        return self.net(x)


class DenoisingAE(nn.Module):
    """Masked-feature denoising autoencoder used for pretraining."""

    def __init__(self, d_in=48):
        super().__init__()
        self.encoder = Encoder(d_in)
        self.decoder = nn.Sequential(nn.ReLU(), nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, d_in))

    def forward(self, x):
        return self.decoder(self.encoder(x))
