#!/usr/bin/env bash
# Copies what a lent GPU's call needs and cannot reach into .device/ (git-ignored), to be named in the call's carry:
# ../shared's test checkpoint and AllenNLP shim, AllenNLP's code (from PyPI, for the peer rows), and with --v9 the
# Korean text split into morphemes (examples/nsmc/presplit.py; kiwipiepy cannot travel). About 8 MB, or 29 MB with
# --v9, beside the 29 MB working tree (64 MiB travel in all).
#
#     bash benchmarks/stage_device.sh [--v9 PRESPLIT_DIR]
#
# Then, on the device, from the repository root:
#     HF_ELMO_SHARED=.device/shared ALLENNLP_SITE=.device/allennlp_site bash benchmarks/gpu_check.sh $OUT/gpu
#     bash examples/nsmc/pretrain_on_gpu.sh .device/v9 $OUT/v9 7
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SHARED=${HF_ELMO_SHARED:-$ROOT/../shared}
DEST=$ROOT/.device
mkdir -p "$DEST/shared/fixtures" "$DEST/shared/peer"
cp -r "$SHARED/fixtures/allennlp-elmo" "$DEST/shared/fixtures/"
cp "$SHARED/peer/allennlp_shim.py" "$DEST/shared/peer/"
if [[ ! -d "$DEST/allennlp_site/allennlp" ]]; then
    python -m pip install -q --no-deps --target "$DEST/allennlp_site" allennlp==2.10.1
fi
if [[ ${1:-} == --v9 ]]; then
    mkdir -p "$DEST/v9"
    cp "$2"/train.txt.gz "$2"/general.txt.gz "$2"/validation.txt.gz "$2"/general_validation.txt.gz "$DEST/v9/"
fi
du -sh "$DEST"
