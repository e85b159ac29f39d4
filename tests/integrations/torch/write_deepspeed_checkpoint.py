"""Run as a script: one DeepSpeed ZeRO-2 training step on the CPU from a model folder, saved as transformers saves a
checkpoint under DeepSpeed (``checkpoint-1/``: ``global_step1/`` shards, ``latest``, ``zero_to_fp32.py``, and the
config and tokenizer, without full weights), plus ``reference.pt``: the weights after the step, to compare with.

``python write_deepspeed_checkpoint.py BASE_FOLDER CHECKPOINT_FOLDER PORT``
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import deepspeed
import deepspeed.ops
import torch
from transformers import AutoModelForCausalLM


def main(base: Path, checkpoint: Path, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    # The shared-memory collective is a C++ extension DeepSpeed compiles on first use; one process needs none.
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(base)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.05)
    config = {"train_batch_size": 1, "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    ids = torch.tensor([[2, 3, 4, 5]])
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    engine.save_checkpoint(str(checkpoint), tag="global_step1")
    for name in ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"):
        if (base / name).exists():
            shutil.copy(base / name, checkpoint / name)
    torch.save(
        {k: v.detach().clone() for k, v in engine.module.state_dict().items()}, checkpoint.parent / "reference.pt"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
