"""Small hand-written PyTorch convnets, one per family the ONNX frontend must import
(the transformers and ConvNeXt are in `torch_transformers.py`).

Each module keeps the structure that matters to an importer (the ops the exporter emits
and how they connect: residual adds, branch concats, channel shuffles) but with few
channels and small inputs, so that export, import, interpretation and ONNX Runtime
together take about a second per model. torchvision is not available, so every block
is written here.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

IMAGE_INPUT = "input"


def conv_bn(
    in_channels: int,
    out_channels: int,
    kernel: int | tuple[int, int] = 3,
    stride: int = 1,
    groups: int = 1,
    activation: type[nn.Module] | None = nn.ReLU,
    padding: int | tuple[int, int] | None = None,
) -> nn.Sequential:
    """Conv (no bias) + BatchNorm + optional activation, "same" padding by default."""
    if padding is None:
        padding = tuple(k // 2 for k in kernel) if isinstance(kernel, tuple) else kernel // 2
    layers: list[nn.Module] = [
        nn.Conv2d(in_channels, out_channels, kernel, stride, padding, groups=groups, bias=False),
        nn.BatchNorm2d(out_channels),
    ]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)


def randomize_norm_stats(module: nn.Module, generator: torch.Generator) -> None:
    """Give every BatchNorm running statistics and affine parameters away from their
    defaults (0/1), so that an importer that drops or misorders them is caught."""
    for layer in module.modules():
        if isinstance(layer, nn.BatchNorm2d):
            count = layer.num_features
            with torch.no_grad():
                layer.running_mean.copy_(torch.rand(count, generator=generator) - 0.5)
                layer.running_var.copy_(torch.rand(count, generator=generator) + 0.5)
                layer.weight.copy_(torch.rand(count, generator=generator) + 0.5)
                layer.bias.copy_(torch.rand(count, generator=generator) * 0.4 - 0.2)


# -- ResNet ---------------------------------------------------------------------------


class ResidualBlock(nn.Module):
    """relu(body(x) + shortcut(x)); the shortcut is a strided 1x1 conv + BN when the
    body changes the shape, else the identity (ResNet v1, RegNet)."""

    def __init__(self, body: nn.Module, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = body
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = conv_bn(cin, cout, 1, stride, activation=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.body(x) + self.shortcut(x))


def basic_block(cin: int, cout: int, stride: int) -> ResidualBlock:
    """ResNet v1 basic block: two 3x3 convs."""
    body = nn.Sequential(conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3, activation=None))
    return ResidualBlock(body, cin, cout, stride)


def bottleneck_block(cin: int, width: int, stride: int) -> ResidualBlock:
    """ResNet v1.5 bottleneck: 1x1 reduce, strided 3x3, 1x1 expand (x4)."""
    body = nn.Sequential(
        conv_bn(cin, width, 1),
        conv_bn(width, width, 3, stride),
        conv_bn(width, width * 4, 1, activation=None),
    )
    return ResidualBlock(body, cin, width * 4, stride)


class ResNetV1(nn.Module):
    def __init__(self, bottleneck: bool, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8, 7, 2), nn.MaxPool2d(3, 2, 1))
        if bottleneck:
            self.stages = nn.Sequential(bottleneck_block(8, 4, 1), bottleneck_block(16, 8, 2))
            features = 32
        else:
            self.stages = nn.Sequential(basic_block(8, 8, 1), basic_block(8, 16, 2))
            features = 16
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(features, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


class PreActBlock(nn.Module):
    """ResNet v2 block: BN-ReLU before each conv; the shortcut branches off after the
    first BN-ReLU when it needs a projection."""

    def __init__(self, in_channels: int, out_channels: int, stride: int) -> None:
        super().__init__()
        self.pre = nn.Sequential(nn.BatchNorm2d(in_channels), nn.ReLU())
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride, 1, bias=False)
        self.post = nn.Sequential(nn.BatchNorm2d(out_channels), nn.ReLU())
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, 1, 1, bias=False)
        self.projection: nn.Module | None = None
        if stride != 1 or in_channels != out_channels:
            self.projection = nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        activated = self.pre(x)
        shortcut = x if self.projection is None else self.projection(activated)
        return self.conv2(self.post(self.conv1(activated))) + shortcut


class ResNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.stages = nn.Sequential(PreActBlock(8, 8, 1), PreActBlock(8, 16, 2))
        self.final = nn.Sequential(nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.final(self.stages(self.stem(x))), 1))


# -- MobileNets -----------------------------------------------------------------------


class MobileNetV1(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()

        def separable(cin: int, cout: int, stride: int) -> nn.Sequential:
            return nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin), conv_bn(cin, cout, 1))

        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2), separable(8, 16, 1), separable(16, 32, 2), separable(32, 32, 1)
        )
        self.pool = nn.AvgPool2d(8)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.pool(self.features(x)).reshape(x.shape[0], -1))


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, activation=nn.ReLU6),
            InvertedBottleneck(8, 8, 1, 1),
            InvertedBottleneck(8, 12, 2, 4),
            InvertedBottleneck(12, 12, 1, 4),
            conv_bn(12, 32, 1, activation=nn.ReLU6),
        )
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(32, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(pooled, 1))


class DropPath(nn.Module):
    """Stochastic depth: drops whole residual branches in training, identity in eval."""

    def __init__(self, probability: float) -> None:
        super().__init__()
        self.probability = probability

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.probability == 0.0:
            return x
        keep = torch.rand(x.shape[0], 1, 1, 1) >= self.probability
        return x * keep / (1.0 - self.probability)


class SqueezeExcite(nn.Module):
    """Channel attention: global pool, two 1x1 convs, a gate."""

    def __init__(
        self, channels: int, squeezed: int, activation: type[nn.Module], gate: type[nn.Module]
    ) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.reduce = nn.Conv2d(channels, squeezed, 1)
        self.activation = activation()
        self.expand = nn.Conv2d(squeezed, channels, 1)
        self.gate = gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.gate(self.expand(self.activation(self.reduce(self.pool(x)))))
        return x * scale


class InvertedBottleneck(nn.Module):
    """MobileNet v2/v3 and EfficientNet block: 1x1 expand, depthwise k x k, optional
    squeeze-excite, linear 1x1 projection; a residual add (through drop path) when the
    shape is kept."""

    def __init__(
        self,
        cin: int,
        cout: int,
        stride: int,
        expand: int,
        activation: type[nn.Module] = nn.ReLU6,
        kernel: int = 3,
        se_gate: type[nn.Module] | None = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(conv_bn(cin, hidden, 1, activation=activation))
        layers.append(conv_bn(hidden, hidden, kernel, stride, groups=hidden, activation=activation))
        if se_gate is not None:
            se_activation = nn.ReLU if se_gate is nn.Hardsigmoid else activation
            layers.append(SqueezeExcite(hidden, max(hidden // 4, 4), se_activation, se_gate))
        layers.append(conv_bn(hidden, cout, 1, activation=None))
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop_path(self.body(x)) if self.residual else self.body(x)


class MobileNetV3(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, activation=nn.Hardswish),
            InvertedBottleneck(8, 8, 1, 2, nn.Hardswish, se_gate=nn.Hardsigmoid),
            InvertedBottleneck(8, 16, 2, 3, nn.Hardswish, kernel=5, se_gate=nn.Hardsigmoid),
            InvertedBottleneck(16, 16, 1, 2, nn.Hardswish),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Linear(16, 32), nn.Hardswish(), nn.Dropout(0.2), nn.Linear(32, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


# -- SqueezeNet, Inception, VGG -------------------------------------------------------


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand: int) -> None:
        super().__init__()
        self.squeeze = nn.Sequential(nn.Conv2d(cin, squeeze, 1), nn.ReLU())
        self.expand1x1 = nn.Sequential(nn.Conv2d(squeeze, expand, 1), nn.ReLU())
        self.expand3x3 = nn.Sequential(nn.Conv2d(squeeze, expand, 3, padding=1), nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        squeezed = self.squeeze(x)
        return torch.cat([self.expand1x1(squeezed), self.expand3x3(squeezed)], 1)


class SqueezeNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        # With a 34x34 input the pools see even sizes (16, then 8), where ceil_mode gives
        # one more output row and column than floor would.
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 4, 8),
            Fire(16, 4, 8),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(16, 8, 16),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5), nn.Conv2d(32, classes, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


class InceptionA(nn.Module):
    """1x1 / 5x5 / double 3x3 / average-pool branches, concatenated."""

    def __init__(self, cin: int) -> None:
        super().__init__()
        self.branch1x1 = conv_bn(cin, 8, 1)
        self.branch5x5 = nn.Sequential(conv_bn(cin, 6, 1), conv_bn(6, 8, 5))
        self.branch3x3 = nn.Sequential(conv_bn(cin, 8, 1), conv_bn(8, 8, 3), conv_bn(8, 8, 3))
        self.branch_pool = conv_bn(cin, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        branches = [self.branch1x1(x), self.branch5x5(x), self.branch3x3(x)]
        return torch.cat([*branches, self.branch_pool(pooled)], 1)


class InceptionC(nn.Module):
    """Factorised 7x7 as 1x7 then 7x1 (and 7x1, 1x7, 7x1, 1x7)."""

    def __init__(self, cin: int, width: int) -> None:
        super().__init__()
        self.branch1x1 = conv_bn(cin, 8, 1)
        self.branch7x7 = nn.Sequential(
            conv_bn(cin, width, 1), conv_bn(width, width, (1, 7)), conv_bn(width, 8, (7, 1))
        )
        self.branch7x7dbl = nn.Sequential(
            conv_bn(cin, width, 1),
            conv_bn(width, width, (7, 1)),
            conv_bn(width, width, (1, 7)),
            conv_bn(width, width, (7, 1)),
            conv_bn(width, 8, (1, 7)),
        )
        self.branch_pool = conv_bn(cin, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)
        branches = [self.branch1x1(x), self.branch7x7(x), self.branch7x7dbl(x)]
        return torch.cat([*branches, self.branch_pool(pooled)], 1)


class InceptionV3(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            conv_bn(3, 8, 3, 2, padding=0), conv_bn(8, 16, 3, padding=0), nn.MaxPool2d(3, 2)
        )
        self.mixed_a = InceptionA(16)
        self.reduce = conv_bn(28, 24, 3, 2, padding=0)
        self.mixed_c = InceptionC(24, 6)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.mixed_c(self.reduce(self.mixed_a(self.stem(x))))
        pooled = F.dropout(F.adaptive_avg_pool2d(features, 1), training=self.training)
        return self.fc(torch.flatten(pooled, 1))


class VGG(nn.Module):
    """Stacks of 3x3 conv + ReLU separated by max pools; a three-layer classifier with
    dropout. `widths` lists channel counts, "M" a max pool."""

    def __init__(self, classes: int = 10, widths: tuple[int | str, ...] = (8, "M", 16, 16, "M")):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for width in widths:
            if isinstance(width, str):
                layers.append(nn.MaxPool2d(2))
            else:
                layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU(inplace=True)]
                channels = width
        self.features = nn.Sequential(*layers)
        hidden = [nn.Linear(channels * 8 * 8, 64), nn.Linear(64, 64)]
        self.classifier = nn.Sequential(
            *(m for linear in hidden for m in (linear, nn.ReLU(True), nn.Dropout())),
            nn.Linear(64, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# -- EfficientNet, DenseNet, ShuffleNet, RegNet ---------------------------------------


class EfficientNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            conv_bn(3, 8, 3, 2, activation=nn.SiLU),
            InvertedBottleneck(8, 8, 1, 1, nn.SiLU, se_gate=nn.Sigmoid),
            InvertedBottleneck(8, 12, 2, 4, nn.SiLU, kernel=5, se_gate=nn.Sigmoid),
            InvertedBottleneck(12, 12, 1, 4, nn.SiLU, kernel=5, se_gate=nn.Sigmoid, drop_path=0.2),
            conv_bn(12, 32, 1, activation=nn.SiLU),
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.2), nn.Linear(32, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class DenseLayer(nn.Module):
    """BN-ReLU-1x1 then BN-ReLU-3x3; its output is concatenated onto its input."""

    def __init__(self, cin: int, growth: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.BatchNorm2d(cin),
            nn.ReLU(),
            nn.Conv2d(cin, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth),
            nn.ReLU(),
            nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False),
        )

    def forward(self, features: list[torch.Tensor]) -> torch.Tensor:
        return self.body(torch.cat(features, 1))


class DenseBlock(nn.Module):
    def __init__(self, cin: int, layers: int, growth: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(DenseLayer(cin + i * growth, growth) for i in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = [x]
        for layer in self.layers:
            features.append(layer(features))
        return torch.cat(features, 1)


class DenseNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 16, 3), nn.MaxPool2d(3, 2, 1))
        self.block1 = DenseBlock(16, 3, 6)
        self.transition = nn.Sequential(
            nn.BatchNorm2d(34), nn.ReLU(), nn.Conv2d(34, 16, 1, bias=False), nn.AvgPool2d(2, 2)
        )
        self.block2 = DenseBlock(16, 2, 6)
        self.final = nn.BatchNorm2d(28)
        self.fc = nn.Linear(28, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        features = self.block2(self.transition(self.block1(self.stem(x))))
        pooled = F.adaptive_avg_pool2d(F.relu(self.final(features)), (1, 1))
        return self.fc(torch.flatten(pooled, 1))


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    batch, channels, height, width = x.size()
    x = x.view(batch, groups, channels // groups, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(batch, -1, height, width)


class ShuffleUnit(nn.Module):
    """ShuffleNet v2 unit: split channels (stride 1) or process twice (stride 2), concat,
    shuffle."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        half = cout // 2
        branch_in = cin if stride > 1 else half
        if stride > 1:
            self.branch1 = nn.Sequential(
                conv_bn(cin, cin, 3, stride, groups=cin, activation=None), conv_bn(cin, half, 1)
            )
        self.branch2 = nn.Sequential(
            conv_bn(branch_in, half, 1),
            conv_bn(half, half, 3, stride, groups=half, activation=None),
            conv_bn(half, half, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            kept, processed = x.chunk(2, dim=1)
            out = torch.cat((kept, self.branch2(processed)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, 8, 3, 2), nn.MaxPool2d(3, 2, 1))
        self.stages = nn.Sequential(ShuffleUnit(8, 16, 2), ShuffleUnit(16, 16, 1))
        self.conv_last = conv_bn(16, 32, 1)
        self.fc = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv_last(self.stages(self.stem(x))).mean([2, 3]))


def regnet_block(cin: int, cout: int, stride: int, group_width: int) -> ResidualBlock:
    """RegNetX block: 1x1, grouped 3x3 (fixed group width), 1x1, residual."""
    body = nn.Sequential(
        conv_bn(cin, cout, 1),
        conv_bn(cout, cout, 3, stride, groups=cout // group_width),
        conv_bn(cout, cout, 1, activation=None),
    )
    return ResidualBlock(body, cin, cout, stride)


class RegNet(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, 8, 3, 2)
        self.stages = nn.Sequential(
            regnet_block(8, 16, 2, 4), regnet_block(16, 16, 1, 4), regnet_block(16, 24, 2, 8)
        )
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(24, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))
