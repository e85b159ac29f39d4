#!/usr/bin/env bash
# OpenRLHF trains on evalsi's reward: the file form of OpenRLHF's remote reward, `--reward.remote_url` pointing
# at evalsi/rewards/openrlhf.py, with EVALSI_REWARD_SPEC naming the RewardSpec it scores with (math-reward.yaml
# here). Each rollout's completion is its query after the prompt, the label (`--data.label_key`) is the
# reference, and every component comes back in `extra_logs`, logged by OpenRLHF as `train/<component>`.
#
# Run it on a machine with GPUs and OpenRLHF (with Ray and vLLM) installed, from anywhere:
#   examples/finetuning/openrlhf-reward.sh [MODEL]        # MODEL defaults to Qwen/Qwen2.5-0.5B-Instruct
# OPENRLHF_TRAIN replaces the launcher (default: python3 -m openrlhf.cli.train_ppo_ray), e.g. to wrap it in
# `ray job submit --`. OpenRLHF before 0.10.2 spells the options --remote_rm_url, --label_key, --input_key.
#
# The HTTP form scores in one shared process instead (batched, with its own cache):
#   evalsi rewards serve --spec examples/finetuning/math-reward.yaml --port 5000 &
#   ... --reward.remote_url http://127.0.0.1:5000/get_reward
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
model=${1:-Qwen/Qwen2.5-0.5B-Instruct}

# The two lines that point OpenRLHF at evalsi: the reward file, and the spec it reads.
reward_file=$("$python" -c "import evalsi.rewards.openrlhf as m; print(m.__file__)")
export EVALSI_REWARD_SPEC="$here/math-reward.yaml"

# shellcheck disable=SC2086  # OPENRLHF_TRAIN is a command line: split it into words
exec ${OPENRLHF_TRAIN:-$python -m openrlhf.cli.train_ppo_ray} \
  --actor.model_name_or_path "$model" \
  --reward.remote_url "$reward_file" \
  --data.prompt_dataset "$here/math-problems.jsonl" \
  --data.input_key question \
  --data.label_key answer \
  --data.input_template $'{}\nPut the final answer in \\boxed{{}}.' \
  --algo.advantage.estimator group_norm \
  --rollout.n_samples_per_prompt 4 \
  --rollout.batch_size 8 \
  --train.batch_size 32 \
  --train.num_episodes 1 \
  --vllm.num_engines 1
