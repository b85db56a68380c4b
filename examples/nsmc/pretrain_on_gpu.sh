#!/usr/bin/env bash
# v9 of the Korean biLM on a lent GPU, in one call: a short probe measures the steps a second, then the run trains
# for about MINUTES minutes, and the folder comes back through OUT_DIR in float16, cut into pieces of at most 15 MiB.
#
#     bash examples/nsmc/pretrain_on_gpu.sh DATA_DIR OUT_DIR [MINUTES] [extra hf-elmo pretrain options...]
#
# DATA_DIR holds presplit.py's output: train.txt.gz (NSMC's training reviews), general.txt.gz (ko-general's training
# lines, read three times, as v8 read them), validation.txt.gz and general_validation.txt.gz, all split into
# morphemes here, since kiwipiepy cannot travel (examples/nsmc/README.md, "v9"). The run reads them with the
# whitespace_split pre-tokenizer; back here, `presplit.py restore` gives the folder its korean_morphemes tokenizer.
# Extra options after MINUTES replace the shape's (a tiny shape rehearses the call on a CPU).
set -euo pipefail

if [[ $# -lt 2 ]]; then
    echo "usage: bash examples/nsmc/pretrain_on_gpu.sh DATA_DIR OUT_DIR [MINUTES] [options...]" >&2
    exit 2
fi
DATA=$1
OUT=$(mkdir -p "$2" && cd "$2" && pwd)
MINUTES=${3:-7}
shift $(($# < 3 ? $# : 3))
WORK=${WORK_DIR:-/tmp/elmo-v9}
PYTHON=${PYTHON:-python}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1
rm -rf "$WORK" && mkdir -p "$WORK"

# v8's units and text, a wider biLM (9.5M parameters without the softmax: 19 MB in float16), bfloat16 autocast.
RUN=(
    "$PYTHON" -m hf_elmo.cli pretrain --train-file "$DATA/train.txt.gz" "$DATA/general.txt.gz" "$DATA/general.txt.gz"
    "$DATA/general.txt.gz" --validation-file "$DATA/validation.txt.gz" "$DATA/general_validation.txt.gz"
    --pre-tokenizer whitespace_split --max-vocab-size 100000 --min-count 3 --char-vocab learned
    --max-characters-per-token 20 --n-negative-samples 1024 --max-length 80 --preset tiny --projection-dim 256
    --cell-dim 1024 --lstm-dropout 0.1 --batch-size 1024 --learning-rate 4e-3 --bf16 true --seed 0
    --report-to none --disable-tqdm true "$@"
)

# The probe: 30 steps, its speed read from the Trainer's log (the first steps' warm-up included, so an underestimate).
"${RUN[@]}" --output-dir "$WORK/probe" --max-steps 30 --warmup-steps 10 --eval-strategy no --save-strategy no \
    --logging-steps 30 2>&1 | tee "$OUT/probe.log"
STEPS=$("$PYTHON" - "$OUT/probe.log" "$MINUTES" <<'EOF'
import ast, sys
logs = [ast.literal_eval(line[line.index("{"):]) for line in open(sys.argv[1]) if "'train_runtime'" in line]
seconds_per_step = float(logs[-1]["train_runtime"]) / 30  # the log prints numbers as strings
print(max(30, int(float(sys.argv[2]) * 60 / seconds_per_step)))
EOF
)
echo "probe: training $STEPS steps in about $MINUTES minutes" | tee "$OUT/steps.txt"
rm -rf "$WORK/probe"

"${RUN[@]}" --output-dir "$WORK/v9" --max-steps "$STEPS" --warmup-steps $((STEPS / 20 + 1)) \
    --logging-steps $((STEPS / 20 + 1)) --eval-strategy steps --eval-steps $((STEPS / 2 + 1)) \
    --save-steps $((STEPS + 1)) 2>&1 | tee "$OUT/train.log"

# Float16 weights (the softmax kept, so that a later run continues it), the tokenizer files, cut to travel.
"$PYTHON" - "$WORK/v9" "$WORK/v9-fp16" <<'EOF'
import shutil, sys
import torch
from hf_elmo import ElmoForPreTraining

model = ElmoForPreTraining.from_pretrained(sys.argv[1], dtype=torch.float16)
model.save_pretrained(sys.argv[2])
for name in ("char_vocab.json", "word_vocab.json", "word_counts.json", "tokenizer_config.json", "README.md"):
    shutil.copy(f"{sys.argv[1]}/{name}", f"{sys.argv[2]}/{name}")
EOF
tar -C "$WORK" -cf - v9-fp16 | split -b 15M - "$OUT/v9-fp16.tar.part-"
ls -la "$OUT"
