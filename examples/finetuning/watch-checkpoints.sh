#!/usr/bin/env bash
# Evaluates every checkpoint a training run saves, from a second process, and writes a stop file that the
# trainer watches as soon as one regresses against the base model.
#
#   examples/finetuning/watch-checkpoints.sh OUTPUT_DIR BASE_MODEL
#
# 1. evaluates BASE_MODEL once, as the base (step "base");
# 2. watches OUTPUT_DIR: each new checkpoint-N is served with `vllm serve` once it has settled (SETTLE seconds
#    unchanged, default 30), evaluated against math-run.yaml, and compared record by record with the base; a
#    significant drop in math-equiv beyond 0.1 writes OUTPUT_DIR/STOP.
# The trainer stops at its next step once OUTPUT_DIR/STOP exists, e.g.
#   python examples/finetuning/grpo_trl.py --output-dir OUTPUT_DIR --stop-file OUTPUT_DIR/STOP
# or evalsi_callback(None, stop_file="OUTPUT_DIR/STOP") in any transformers/TRL trainer.
# Stop watching with Ctrl-C (exit code 3 if a checkpoint regressed), then draw the learning curve:
#   evalsi checkpoints curve -f examples/finetuning/math-run.yaml --training-run grpo-demo \
#     --log-dir OUTPUT_DIR/evalsi-logs --regression math-equiv:0.1
# Serving needs vLLM (a GPU); for LoRA runs use `--serve lora --base-url URL` with one vLLM started with
# --enable-lora, and for small models on a CPU `--serve transformers`.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: watch-checkpoints.sh OUTPUT_DIR BASE_MODEL}
base=${2:?usage: watch-checkpoints.sh OUTPUT_DIR BASE_MODEL}
common=(-f "$here/math-run.yaml" --training-run grpo-demo --log-dir "$out/evalsi-logs" --serve vllm)

evalsi checkpoints eval "$base" --step base "${common[@]}"
exec evalsi checkpoints watch "$out" "${common[@]}" \
  --regression math-equiv:0.1 --stop-file "$out/STOP" --settle "${SETTLE:-30}"
