"""Full-size networks people deploy, written here with torchvision's layer shapes
(PyPI's torchvision does not import beside the local torch wheel), exported by
`torch.onnx.export` as a user's model would be, for `benchmarks/compare.py`:

    python benchmarks/torch_models.py efficientnet_b0 -o efficientnet_b0.onnx
    python benchmarks/compare.py efficientnet_b0.onnx --threads 2

Each definition is checked against torchvision's published parameter count
(`PARAMETERS`) before it is exported; weights are seeded random (BatchNorm
statistics too), which changes nothing for timing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

# torchvision's published parameter counts, and Hugging Face's for bert-base-uncased.
PARAMETERS = {
    "resnet18": 11_689_512,
    "resnet50": 25_557_032,
    "mobilenet_v2": 3_504_872,
    "efficientnet_b0": 5_288_548,
    "convnext_tiny": 28_589_128,
    "vit_b_16": 86_567_656,
    "bert_base": 109_482_240,
}


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1,
             act: bool = True) -> nn.Sequential:  # fmt: skip
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout, eps=1e-3),
    ]
    if act:
        layers.append(nn.SiLU())
    return nn.Sequential(*layers)


class _SqueezeExcitation(nn.Module):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = nn.functional.adaptive_avg_pool2d(x, 1)
        scale = torch.sigmoid(self.fc2(nn.functional.silu(self.fc1(scale))))
        return x * scale


class _MBConv(nn.Module):
    def __init__(self, expand: int, kernel: int, stride: int, cin: int, cout: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1))
        layers += [
            _conv_bn(hidden, hidden, kernel, stride, groups=hidden),
            _SqueezeExcitation(hidden, max(1, cin // 4)),
            _conv_bn(hidden, cout, 1, act=False),
        ]
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.residual else y


class EfficientNetB0(nn.Module):
    # (expand ratio, kernel, stride, in channels, out channels, layers): torchvision's.
    STAGES = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2),
              (6, 3, 2, 40, 80, 3), (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4),
              (6, 3, 1, 192, 320, 1))  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2)]
        for expand, kernel, stride, cin, cout, count in self.STAGES:
            for index in range(count):
                first = index == 0
                layers.append(
                    _MBConv(expand, kernel, stride if first else 1, cin if first else cout, cout)
                )
        layers.append(_conv_bn(320, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class _Residual(nn.Module):
    """torchvision's BasicBlock (two 3x3 convs) or Bottleneck (1x1, 3x3 with the
    stride, 1x1 x4), with a 1x1 projection where the shape changes."""

    def __init__(self, cin: int, width: int, stride: int, bottleneck: bool) -> None:
        super().__init__()
        cout = width * 4 if bottleneck else width
        shapes = (
            [(cin, width, 1, 1), (width, width, 3, stride), (width, cout, 1, 1)]
            if bottleneck
            else [(cin, width, 3, stride), (width, cout, 3, 1)]
        )
        layers: list[nn.Module] = []
        for index, (a, b, kernel, step) in enumerate(shapes):
            layers += [nn.Conv2d(a, b, kernel, step, kernel // 2, bias=False), nn.BatchNorm2d(b)]
            if index < len(shapes) - 1:
                layers.append(nn.ReLU())
        self.body = nn.Sequential(*layers)
        self.project = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.project(x))


class _ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...], bottleneck: bool) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]  # fmt: skip
        cin = 64
        for stage, count in enumerate(blocks):
            width = 64 * 2**stage
            for index in range(count):
                stride = 2 if stage > 0 and index == 0 else 1
                layers.append(_Residual(cin, width, stride, bottleneck))
                cin = width * 4 if bottleneck else width
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.fc(torch.flatten(x, 1))


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers += [nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6()]
        layers += [
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False),
            nn.BatchNorm2d(hidden),
            nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False),
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.residual else self.conv(x)


class MobileNetV2(nn.Module):
    # (expand ratio, out channels, layers, stride of the first): torchvision's.
    STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
              (6, 160, 3, 2), (6, 320, 1, 1))  # fmt: skip

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU6()
        ]  # fmt: skip
        cin = 32
        for expand, cout, count, stride in self.STAGES:
            for index in range(count):
                layers.append(_InvertedResidual(cin, cout, stride if index == 0 else 1, expand))
                cin = cout
        layers += [nn.Conv2d(320, 1280, 1, bias=False), nn.BatchNorm2d(1280), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, 1000))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class _LayerNorm2d(nn.LayerNorm):
    """torchvision's LayerNorm2d: LayerNorm over channels of an NCHW tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class _ConvNeXtBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(dim, dim, 7, padding=3, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.mlp(self.norm(self.dwconv(x).permute(0, 2, 3, 1))).permute(0, 3, 1, 2)
        return x + self.layer_scale * y


class ConvNeXtTiny(nn.Module):
    DEPTHS = (3, 3, 9, 3)
    DIMS = (96, 192, 384, 768)

    def __init__(self) -> None:
        super().__init__()
        layers: list[nn.Module] = [
            nn.Sequential(nn.Conv2d(3, 96, 4, 4), _LayerNorm2d(96, eps=1e-6))
        ]
        for stage, (depth, dim) in enumerate(zip(self.DEPTHS, self.DIMS, strict=True)):
            if stage:
                previous = self.DIMS[stage - 1]
                layers.append(
                    nn.Sequential(_LayerNorm2d(previous, eps=1e-6), nn.Conv2d(previous, dim, 2, 2))
                )
            layers.append(nn.Sequential(*(_ConvNeXtBlock(dim) for _ in range(depth))))
        self.features = nn.Sequential(*layers)
        self.norm = _LayerNorm2d(768, eps=1e-6)
        self.classifier = nn.Linear(768, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(nn.functional.adaptive_avg_pool2d(self.features(x), 1))
        return self.classifier(torch.flatten(x, 1))


class _EncoderBlock(nn.Module):
    """torchvision's ViT encoder block: pre-norm attention and MLP, both residual."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = x + y
        return x + self.mlp(self.ln_2(x))


class ViTB16(nn.Module):
    def __init__(self, dim: int = 768, layers: int = 12) -> None:
        super().__init__()
        self.conv_proj = nn.Conv2d(3, dim, 16, 16)
        self.class_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embedding = nn.Parameter(torch.empty(1, 197, dim).normal_(std=0.02))
        self.layers = nn.Sequential(*(_EncoderBlock(dim, 12, 3072) for _ in range(layers)))
        self.ln = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv_proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.ln(self.layers(x + self.pos_embedding))
        return self.head(x[:, 0])


class _BertLayer(nn.Module):
    """A post-norm BERT encoder layer, as Hugging Face's bert-base-uncased has it."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.attention_output = nn.Linear(dim, dim)
        self.attention_norm = nn.LayerNorm(dim, eps=1e-12)
        self.intermediate = nn.Linear(dim, hidden)
        self.output = nn.Linear(hidden, dim)
        self.output_norm = nn.LayerNorm(dim, eps=1e-12)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, dim = x.shape
        return x.view(batch, length, self.heads, dim // self.heads).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._split(self.query(x)), self._split(self.key(x)), self._split(self.value(x))
        scores = q @ k.transpose(-1, -2) / (q.shape[-1] ** 0.5)
        context = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).flatten(2)
        x = self.attention_norm(x + self.attention_output(context))
        return self.output_norm(x + self.output(nn.functional.gelu(self.intermediate(x))))


class BertBase(nn.Module):
    """bert-base-uncased's encoder and pooler; one sequence of token ids in, with no
    padding (so no attention mask) and token type 0."""

    def __init__(self, vocab: int = 30522, dim: int = 768, layers: int = 12) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(512, dim)
        self.token_type_embeddings = nn.Embedding(2, dim)
        self.embedding_norm = nn.LayerNorm(dim, eps=1e-12)
        self.layers = nn.Sequential(*(_BertLayer(dim, 12, 3072) for _ in range(layers)))
        self.pooler = nn.Linear(dim, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1]).unsqueeze(0)
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        x = self.embedding_norm(x + self.token_type_embeddings.weight[0])
        x = self.layers(x)
        return torch.tanh(self.pooler(x[:, 0]))


MODELS = {
    "resnet18": lambda: _ResNet((2, 2, 2, 2), bottleneck=False),
    "resnet50": lambda: _ResNet((3, 4, 6, 3), bottleneck=True),
    "mobilenet_v2": MobileNetV2,
    "efficientnet_b0": EfficientNetB0,
    "convnext_tiny": ConvNeXtTiny,
    "vit_b_16": ViTB16,
    "bert_base": BertBase,
}


def build(name: str) -> nn.Module:
    """The model in eval mode, seeded, checked against the published parameter count."""
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    for module in model.modules():  # seeded statistics, as a trained model has
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    count = sum(p.numel() for p in model.parameters())
    if count != PARAMETERS[name]:
        raise SystemExit(f"{name}: {count} parameters, the published model has {PARAMETERS[name]}")
    return model


def example_input(name: str) -> torch.Tensor:
    """BERT reads 128 token ids; the others an image."""
    return torch.randint(0, 30522, (1, 128)) if name == "bert_base" else torch.randn(1, 3, 224, 224)


def export(name: str, path: Path) -> Path:
    """Write the model as ONNX (`torch.onnx.export`), or as a `torch.export` program
    (`torch.export.save`) when `path` ends in .pt2."""
    model, x = build(name), example_input(name)
    if path.suffix == ".pt2":
        torch.export.save(torch.export.export(model, (x,)), str(path))
        return path
    torch.onnx.export(model, (x,), str(path), opset_version=17, input_names=["input"],
                      output_names=["output"], dynamo=False)  # fmt: skip
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("-o", "--output", type=Path, required=True, help=".onnx, or .pt2")
    args = parser.parse_args(argv)
    print(f"wrote {export(args.model, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
