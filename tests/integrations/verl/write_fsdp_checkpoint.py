"""Run as a script: save a model folder's weights (each moved by 0.25) as verl's FSDP checkpoint manager saves an
actor in training, in one CPU process on gloo, FSDP2 over a one-rank ``fsdp`` mesh as verl builds it:
``STEP_FOLDER/actor/`` with ``model_world_size_1_rank_0.pt``, ``fsdp_config.json`` and ``huggingface/``; plus
``reference.pt`` beside ``STEP_FOLDER``: the weights saved, to compare with.

``python write_fsdp_checkpoint.py BASE_FOLDER STEP_FOLDER PORT``
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager


def main(base: Path, step: Path, port: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    model = AutoModelForCausalLM.from_pretrained(base)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.25)  # the checkpoint is not the base model
    reference = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fully_shard(model, mesh=init_device_mesh("cpu", (1,), mesh_dim_names=("fsdp",)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    manager = FSDPCheckpointManager(model, optimizer, processing_class=AutoTokenizer.from_pretrained(base))
    manager.save_checkpoint(str(step / "actor"), global_step=int(step.name.rsplit("_", 1)[1]))
    torch.save(reference, step.parent / "reference.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
