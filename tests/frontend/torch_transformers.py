"""Small hand-written PyTorch transformers, and ConvNeXt (a convnet built from
transformer parts: LayerNorm, Linear, GELU), for the ONNX frontend's import tests.

As in `torch_models.py`: the structure an importer sees (attention written out with
reshapes and matmuls, the mask spellings of exported BERTs) at a small size.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F


class ConvNeXtBlock(nn.Module):
    """Depthwise 7x7, then channels-last LayerNorm / Linear / GELU / Linear, layer scale."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.rand(dim) * 0.5 + 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dwconv(x).permute(0, 2, 3, 1)
        y = self.pwconv2(F.gelu(self.pwconv1(self.norm(y))))
        return x + (self.gamma * y).permute(0, 3, 1, 2)


class ChannelsFirstLayerNorm(nn.Module):
    """LayerNorm over channels of an NCHW tensor, written out as ConvNeXt does."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = nn.Parameter(torch.rand(channels) - 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(1, keepdim=True)
        variance = (x - mean).pow(2).mean(1, keepdim=True)
        x = (x - mean) / torch.sqrt(variance + 1e-6)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


class ConvNeXt(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 4, 4), ChannelsFirstLayerNorm(16))
        self.stage1 = ConvNeXtBlock(16)
        self.downsample = nn.Sequential(ChannelsFirstLayerNorm(16), nn.Conv2d(16, 24, 2, 2))
        self.stage2 = ConvNeXtBlock(24)
        self.norm = nn.LayerNorm(24)
        self.fc = nn.Linear(24, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.stage2(self.downsample(self.stage1(self.stem(x))))
        return self.fc(self.norm(features.mean([-2, -1])))


class MultiHeadAttention(nn.Module):
    """Self-attention written out (no nn.MultiheadAttention) so the export is plain
    MatMul / Reshape / Transpose / Softmax, as from most model code."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = dim // heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        if mask is not None:
            scores = scores + mask
        attention = scores.softmax(dim=-1)
        out = torch.matmul(attention, v).transpose(1, 2).reshape(batch, tokens, dim)
        return self.proj(out)


class ViTBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attention = MultiHeadAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ViT(nn.Module):
    def __init__(self, classes: int = 10, dim: int = 32, patch: int = 8, image: int = 32):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.5)
        self.position = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, dim) * 0.5)
        self.blocks = nn.Sequential(ViTBlock(dim, 4), ViTBlock(dim, 4))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        tokens = torch.cat([cls, tokens], dim=1) + self.position
        return self.head(self.norm(self.blocks(tokens))[:, 0])


def erf_gelu(x: torch.Tensor) -> torch.Tensor:
    """GELU spelled out with erf, as BERT's original code does."""
    return x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(dim, heads)
        self.norm1 = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, 4 * dim)
        self.output = nn.Linear(4 * dim, dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-12)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x, mask))
        return self.norm2(x + self.output(erf_gelu(self.intermediate(x))))


class BertEncoder(nn.Module):
    """Embeddings (word + position + token type), two encoder layers and a pooler.
    Inputs: int64 token ids and a 0/1 attention mask; outputs the sequence and the pooled
    first token."""

    def __init__(self, vocab: int = 100, dim: int = 32, max_positions: int = 32) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(max_positions, dim)
        self.token_type = nn.Embedding(2, dim)
        self.register_buffer("position_ids", torch.arange(max_positions).unsqueeze(0))
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(dim, 4), BertLayer(dim, 4)])
        self.pooler = nn.Linear(dim, dim)

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        length = input_ids.shape[1]
        positions = self.position_ids[:, :length]
        token_types = torch.zeros_like(input_ids)
        x = self.word(input_ids) + self.position(positions) + self.token_type(token_types)
        x = self.norm(x)
        # Two mask spellings seen in exported BERTs: (1 - mask) * -10000, and masked_fill
        # (Where) on the padding positions.
        extended = attention_mask[:, None, None, :].to(x.dtype)
        additive = (1.0 - extended) * -10000.0
        additive = additive.masked_fill(attention_mask[:, None, None, :] == 0, -10000.0)
        for layer in self.layers:
            x = layer(x, additive)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled
