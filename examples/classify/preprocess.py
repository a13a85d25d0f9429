"""Turn a photo into the `.npz` input of `efficientnet_lite0.onnx` (needs Pillow).

    python examples/classify/preprocess.py examples/classify/chelsea.png -o chelsea.npz

EfficientNet-Lite's own evaluation preprocessing (TensorFlow's
``efficientnet/preprocessing.py`` with the Lite builder's constants), redone with Pillow:

1. centre crop a square of side ``224 / (224 + 32) * min(height, width)`` (the
   "crop padding" of 32 pixels);
2. resize it to 224 x 224 with bicubic interpolation;
3. normalise each RGB channel as ``(pixel - 127) / 128`` (the Lite models use these
   inception-style constants instead of ImageNet's per-channel mean and std);
4. lay it out as NCHW float32, batch 1, under the model's input name ``images``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

IMAGE_SIZE = 224
CROP_PADDING = 32
MEAN_RGB = 127.0
STDDEV_RGB = 128.0
INPUT_NAME = "images"


def preprocess(path: str | Path, image_size: int = IMAGE_SIZE) -> np.ndarray:
    """The photo at `path` as a float32 array of shape [1, 3, image_size, image_size]."""
    try:
        from PIL import Image
    except ImportError as error:
        raise SystemExit("preprocess.py needs Pillow: pip install -e '.[examples]'") from error

    with Image.open(path) as image:
        rgb = image.convert("RGB")
    width, height = rgb.size
    crop = int(image_size / (image_size + CROP_PADDING) * min(height, width))
    top = (height - crop + 1) // 2
    left = (width - crop + 1) // 2
    square = rgb.crop((left, top, left + crop, top + crop))
    resized = square.resize((image_size, image_size), Image.Resampling.BICUBIC)
    pixels = np.asarray(resized, dtype=np.float32)  # H, W, C in 0..255
    normalised = (pixels - MEAN_RGB) / STDDEV_RGB
    return np.ascontiguousarray(normalised.transpose(2, 0, 1)[np.newaxis], dtype=np.float32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("image", type=Path, help="a photo Pillow can read (PNG, JPEG, ...)")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the .npz to write")
    parser.add_argument("--input-name", default=INPUT_NAME, help="the model's input name")
    args = parser.parse_args(argv)
    array = preprocess(args.image)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    np.savez(args.output, **{args.input_name: array})
    print(f"wrote {args.output}: {args.input_name} {list(array.shape)} {array.dtype}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
