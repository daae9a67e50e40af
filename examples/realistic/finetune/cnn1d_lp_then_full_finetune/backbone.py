import torch.nn as nn


def conv_block(c_in, c_out, k, stride):
    return nn.Sequential(nn.Conv1d(c_in, c_out, k, stride=stride, padding=k // 2, bias=False),
                         nn.BatchNorm1d(c_out), nn.ReLU(inplace=True))


class ConvBackbone(nn.Module):
    def __init__(self, width=32, out_dim=64):
        super().__init__()
        self.features = nn.Sequential(
            conv_block(1, width, 7, 1),
            conv_block(width, 2 * width, 5, 2),
            conv_block(2 * width, out_dim, 5, 2),
            conv_block(out_dim, out_dim, 3, 2),
        )
        self.pool = nn.AdaptiveAvgPool1d(1)
        self.out_dim = out_dim

    def forward(self, x):
        return self.pool(self.features(x)).flatten(1)
