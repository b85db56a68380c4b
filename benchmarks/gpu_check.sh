#!/usr/bin/env bash
# Everything hf_elmo claims about CUDA, run on this machine's first GPU; results in OUTPUT_DIR/gpu_check.md.
#
#     bash benchmarks/gpu_check.sh OUTPUT_DIR
#
# 1. the GPU tests (pytest -m gpu);
# 2. inference throughput on CUDA in fp32, TF32, bf16 and fp16 at batch 1, 32, 64 and 256, beside AllenNLP's Elmo
#    on the same GPU when it is importable (see ../shared/peer/README.md; ALLENNLP_SITE, default /tmp/allennlp_site),
#    with each row's peak GPU memory and its top layer's minimum cosine with float32;
# 3. pre-training throughput: the path before the fast training recurrence beside today's in fp32 and under --bf16
#    (benchmark_pretrain.py, on the NSMC text of ../shared/data/nsmc when it is there), and hf-elmo pretrain of the
#    original shapes in fp32 and with --bf16 on a generated corpus, which needs no data;
# 4. a Trainer fine-tuning step in bf16 (and fp32 beside it), with the peak GPU memory;
# 5. hf-elmo embed --device cuda on a generated 10,000-line corpus: wall time, then the split between loading,
#    tokenizing, model and writing from a profiled run of the same command.
# Run from the repository root, with the test extra installed; PYTHON (default python) is the interpreter and
# HF_ELMO_SHARED (default ../shared) the shared folder: on a lent GPU, the copy benchmarks/stage_device.sh makes.
# GPU_CHECK_DEVICE=cpu rehearses the same steps on a CPU at toy sizes (their figures mean nothing), to see that every
# step reaches its end before GPU time is spent on it.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: bash benchmarks/gpu_check.sh OUTPUT_DIR" >&2
    exit 2
fi
PYTHON=${PYTHON:-python}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
if [[ $DEVICE == cuda ]]; then
    if ! "$PYTHON" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "gpu_check.sh: no CUDA GPU here (torch.cuda.is_available() is False); run it on a CUDA machine" >&2
        exit 1
    fi
    BATCHES=1:64,32:1024,64:2048,256:4096 LINES=10000 STEPS=20 FINETUNE=(--batch-size 32 --steps 10) EMBED_BATCH=64
else  # the rehearsal: every step at toy sizes
    BATCHES=1:2,4:4 LINES=30 STEPS=1 FINETUNE=(--batch-size 2 --steps 1) EMBED_BATCH=4
fi

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=$(mkdir -p "$1" && cd "$1" && pwd)
RESULTS="$OUT/gpu_check.md"
SHARED=$(cd "${HF_ELMO_SHARED:-$ROOT/../shared}" 2>/dev/null && pwd || echo "${HF_ELMO_SHARED:-$ROOT/../shared}")
PEER_PATH="${ALLENNLP_SITE:-/tmp/allennlp_site}:$SHARED/peer"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 HF_ELMO_SHARED="$SHARED"
cd "$ROOT"

# Runs a command, its output going to the terminal and, under a heading with the exact command, to RESULTS; a
# failed step is recorded and the others still run.
FAILED=()
step() {
    local title=$1
    shift
    printf '\n## %s\n\n```\n%s\n```\n\n' "$title" "$*" >> "$RESULTS"
    if ! "$@" 2>&1 | tee -a "$RESULTS"; then
        echo "FAILED: $title" | tee -a "$RESULTS"
        FAILED+=("$title")
    fi
}

{
    echo "# gpu_check.sh, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), device $DEVICE"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true
    "$PYTHON" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)"
} > "$RESULTS"

if [[ $DEVICE == cuda ]]; then
    step "GPU tests" "$PYTHON" -m pytest -m gpu -q -p no:cacheprovider
fi

CHECKPOINT="$OUT/checkpoint"
for dtype in fp32 tf32 bf16 fp16; do
    step "Inference, $dtype" env PYTHONPATH="$PYTHONPATH:$PEER_PATH" "$PYTHON" benchmarks/benchmark_inference.py \
        --device "$DEVICE" --dtype "$dtype" --batches "$BATCHES" --checkpoint-dir "$CHECKPOINT"
done

NSMC="$SHARED/data/nsmc/reviews.tsv.gz"
if [[ -f "$NSMC" && $DEVICE == cuda ]]; then
    "$PYTHON" examples/nsmc/prepare_nsmc.py --input "$NSMC" --output-dir "$OUT/nsmc" --extra-train-sizes 0 \
        --pretrain-size 0 > /dev/null
    step "Pre-training throughput (hf-elmo pretrain on CUDA), old and new path" "$PYTHON" \
        benchmarks/benchmark_pretrain.py --train-file "$OUT/nsmc/pretrain_train.txt" --threads 16 --steps 30
else
    printf '\n## Pre-training throughput\n\nskipped: %s is missing\n' "$NSMC" | tee -a "$RESULTS"
fi
# A generated corpus of 10,000 lines: pre-training reads it here, hf-elmo embed below.
"$PYTHON" -c "
import sys; sys.path.insert(0, 'benchmarks')
from common import make_sentences
open(sys.argv[1], 'w').write(''.join(' '.join(words) + '\n' for words in make_sentences(int(sys.argv[2]), seed=1)))
" "$OUT/corpus.txt" "$LINES"
head -n 64 "$OUT/corpus.txt" > "$OUT/validation.txt"
for bf16 in false true; do
    rm -rf "$OUT/pretrain" "$OUT/pretrain.parts"
    step "hf-elmo pretrain on $DEVICE, original shapes, --bf16 $bf16, generated corpus" "$PYTHON" -m hf_elmo.cli \
        pretrain --train-file "$OUT/corpus.txt" --validation-file "$OUT/validation.txt" --output-dir "$OUT/pretrain" \
        --preset original --batch-size 64 --max-steps "$STEPS" --bf16 "$bf16" --eval-strategy no \
        --save-steps 1000000 --logging-steps "$STEPS" --disable-tqdm true --report-to none --seed 0 \
        --use-cpu "$([[ $DEVICE == cpu ]] && echo true || echo false)"
done
rm -rf "$OUT/pretrain" "$OUT/pretrain.parts"
for precision in bf16 fp32; do
    step "Trainer fine-tuning step, $precision" "$PYTHON" benchmarks/benchmark_finetune.py --device "$DEVICE" \
        --precision "$precision" "${FINETUNE[@]}"
done

"$PYTHON" -m hf_elmo.cli convert --options-file "$CHECKPOINT/options.json" --weight-file "$CHECKPOINT/weights.hdf5" \
    --output-dir "$OUT/model" --overwrite > /dev/null
rm -rf "$OUT/vectors.h5" "$OUT/vectors.h5.parts" "$OUT/profiled.h5" "$OUT/profiled.h5.parts"
began=$(date +%s.%N)
step "hf-elmo embed --device $DEVICE, $LINES lines" "$PYTHON" -m hf_elmo.cli embed "$OUT/model" "$OUT/corpus.txt" \
    "$OUT/vectors.h5" --top --device "$DEVICE" --batch-size "$EMBED_BATCH"
echo "wall time: $(awk "BEGIN {printf \"%.1f\", $(date +%s.%N) - $began}") s, loading the model included" \
    | tee -a "$RESULTS"
step "hf-elmo embed --device $DEVICE, the same run profiled" "$PYTHON" -m cProfile -o "$OUT/embed.prof" \
    -m hf_elmo.cli embed "$OUT/model" "$OUT/corpus.txt" "$OUT/profiled.h5" --top --device "$DEVICE" \
    --batch-size "$EMBED_BATCH"
step "hf-elmo embed, where the time goes" "$PYTHON" benchmarks/embed_time_split.py "$OUT/embed.prof"
rm -rf "$OUT/profiled.h5"

echo "results: $RESULTS"
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "gpu_check.sh: ${#FAILED[@]} step(s) failed: ${FAILED[*]}" >&2
    exit 1
fi
