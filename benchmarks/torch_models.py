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

# torchvision's published parameter counts.
PARAMETERS = {"efficientnet_b0": 5_288_548}


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


MODELS = {"efficientnet_b0": EfficientNetB0}


def export(name: str, path: Path) -> Path:
    torch.manual_seed(0)
    model = MODELS[name]().eval()
    for module in model.modules():  # seeded statistics, as a trained model has
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.uniform_(-0.1, 0.1)
            module.running_var.uniform_(0.5, 1.5)
    count = sum(p.numel() for p in model.parameters())
    if count != PARAMETERS[name]:
        raise SystemExit(f"{name}: {count} parameters, torchvision's has {PARAMETERS[name]}")
    x = torch.randn(1, 3, 224, 224)
    torch.onnx.export(model, (x,), str(path), opset_version=17, input_names=["input"],
                      output_names=["output"], dynamo=False)  # fmt: skip
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("-o", "--output", type=Path, required=True)
    args = parser.parse_args(argv)
    print(f"wrote {export(args.model, args.output)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
