#!/bin/sh
# Classify a photo with the pretrained EfficientNet-Lite0, compiled by Ember.
#
#   examples/classify/classify.sh [IMAGE] [OUTDIR]
#
# IMAGE defaults to the committed chelsea.png, OUTDIR to build/classify. Needs Ember
# installed with the `examples` extra (Pillow): pip install -e '.[examples]'.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
image=${1:-$here/chelsea.png}
out=${2:-build/classify}
mkdir -p "$out"

set -x
python "$here/preprocess.py" "$image" -o "$out/input.npz"
ember compile "$here/efficientnet_lite0.onnx" --target llvm -o "$out/efficientnet_lite0.tar"
ember run "$out/efficientnet_lite0.tar" --inputs "$out/input.npz" -o "$out/predictions.npz" \
    --print-time --print-top 5 --labels "$here/imagenet_labels.txt"
