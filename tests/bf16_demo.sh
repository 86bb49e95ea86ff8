#!/usr/bin/env bash
# The demo trained as scripts/demo trains it, in FP32 and in bf16, must reach test accuracies
# within one point (issue 13). bf16 is the AVX512-BF16 path where the CPU has it, else
# bf16-emulated, the same arithmetic. Both runs are seeded: the figures are fixed on a machine.
# usage: bf16_demo.sh APP_DIR REPO_DIR WORK_DIR
set -euo pipefail
apps=$1 repo=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
"$apps/enhanced-data" demo "$work/data" >/dev/null
bf16=bf16-emulated
grep -qw avx512_bf16 /proc/cpuinfo && bf16=bf16
accuracy() {  # train with --precision $1, print the test accuracy
  "$apps/enhanced-train" --data "$work/data/train.ebin" --valid "$work/data/valid.ebin" --pretrained "$repo/data/emb.bin" \
    --embedding-dim 32 --out "$work/$1" --epochs 10 --hidden 32 --batch-size 32 --quiet --precision "$1" >&2
  "$apps/enhanced-eval" --data "$work/data/test.ebin" --checkpoint "$work/$1/best.safetensors" --precision "$1" --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["accuracy"])'
}
fp32_accuracy=$(accuracy fp32)
bf16_accuracy=$(accuracy "$bf16")
echo "test accuracy: fp32 $fp32_accuracy, $bf16 $bf16_accuracy"
awk -v a="$fp32_accuracy" -v b="$bf16_accuracy" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  { echo "FAILED: bf16 is more than one point away from fp32"; exit 1; }
