#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: the `gpu`-marked tests, then `zoo bench` with
# bf16, FlashAttention through SDPA, the xFormers kernel (when installed) and
# torch.compile, then the host's CPU (another kind of CPU than the development
# machine's): zoo's native products against oneDNN and FBGEMM, and `zoo bench decode`
# against CTranslate2 in fp32 and int8. Each step under a timeout (11 minutes in all);
# everything lands in $OUT.
#
#   bash benchmarks/gpu.sh                  # .venv from the README, results in bench-gpu/
#   PYTHON=python OUT=/tmp/b PEAK_TFLOPS=989 bash benchmarks/gpu.sh
#
# MFU is reported against PEAK_TFLOPS (the card's dense bf16 peak; 989 for an
# H200 SXM) as well as against the matmul peak measured in the same run.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-bench-gpu}
PEAK=${PEAK_TFLOPS:-989}
mkdir -p "$OUT"
status=0
step() { echo; echo "== $*"; }

step "device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$OUT/device.txt"
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" | tee -a "$OUT/device.txt"

step "gpu tests"
timeout 120 "$PY" -m pytest -m gpu -q -p no:cacheprovider tests 2>&1 | tail -20 | tee "$OUT/gpu-tests.txt" || status=1

# transformer-base at a GPU-sized batch: 64 x 256 source and target tokens
TRAIN=(--device cuda --batch 64 --length 256 --repeats 5 --wait 0 --peak-tflops "$PEAK")
step "train: zoo vs torch.nn.Transformer vs Marian, bf16 and fp32 (sdpa: FlashAttention)"
timeout 90 "$PY" -m zoo bench train "${TRAIN[@]}" --dtypes bf16,fp32 --json "$OUT/train.json" || status=1

step "train: torch.compile, bf16"
timeout 120 "$PY" -m zoo bench train "${TRAIN[@]}" --dtypes bf16 --impls zoo,torch --compile \
    --json "$OUT/train-compile.json" || status=1

if "$PY" -c "import xformers.ops" 2>/dev/null; then
    step "train: the xformers kernel, bf16"
    timeout 45 "$PY" -m zoo bench train "${TRAIN[@]}" --dtypes bf16 --impls zoo --kernel xformers \
        --json "$OUT/train-xformers.json" || status=1
else
    echo "xformers is not installed (pip install 'zoo-transformers[xformers]'): its run is skipped"
fi

step "decode: greedy and beam 4"
timeout 45 "$PY" -m zoo bench decode --device cuda --batch 64 --repeats 3 --wait 0 \
    --impls zoo,marian --json "$OUT/decode.json" || status=1

step "vit-base: inference and training, bf16 and fp32"
timeout 60 "$PY" -m zoo bench vit --device cuda --vit-recipe vit-base-patch16-224 --batch 64 \
    --repeats 5 --wait 0 --peak-tflops "$PEAK" --json "$OUT/vit.json" || status=1

step "host CPU: zoo's native products against oneDNN's and FBGEMM's (sets native_rows)"
lscpu | grep -E "Model name|^CPU\(s\)|Flags" | cut -c1-400 | tee "$OUT/host-cpu.txt"
timeout 40 "$PY" -m zoo native build || status=1
timeout 45 "$PY" benchmarks/few_row_products.py --rows 1,16,64,128 --rounds 1 \
    | tee "$OUT/products-fp32.txt" || status=1
timeout 30 "$PY" benchmarks/few_row_products.py --int8 --rows 1,16,64,128 --rounds 1 \
    | tee "$OUT/products-int8.txt" || status=1

step "host CPU: decode, zoo against CTranslate2, fp32 and int8"
timeout 120 "$PY" -m zoo bench decode --device cpu --impls zoo,ct2 --dtypes fp32,int8 \
    --repeats 2 --wait 0 --json "$OUT/decode-cpu.json" || status=1

step "done (status $status); results in $OUT/"
exit $status
