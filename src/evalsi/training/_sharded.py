"""Sharded checkpoints: the formats distributed trainers save, which no server loads until they are converted.

- ``verl-fsdp``: verl's FSDP actor (``global_step_N/actor``): ``model_world_size_W_rank_R.pt`` per rank,
  ``fsdp_config.json`` (``world_size``) and ``huggingface/`` (config and tokenizer, no weights). verl's model
  merger turns it into a Hugging Face folder.
- ``verl-megatron``: verl's Megatron actor: ``model/dist_ckpt/`` (``dist_ckpt/`` in verl's older layout) beside
  ``model/huggingface/``. Its merger needs Megatron-Core (and usually GPUs): evalsi names the command, never runs it.
- ``deepspeed``: a DeepSpeed ZeRO checkpoint: a tag folder (``global_step100``) of ``*_model_states.pt`` and
  ``*_optim_states.pt``, the ``latest`` file naming the newest tag beside it (also inside a transformers
  ``checkpoint-N`` saved under DeepSpeed); ``zero_to_fp32`` consolidates it.
- ``dcp``: a PyTorch distributed checkpoint (``torch.distributed.checkpoint``, FSDP's sharded state dict):
  ``.metadata`` and ``__R_I.distcp`` files; ``dcp_to_torch_save`` turns it into one state dictionary.

:func:`find_sharded` recognises them (and whether every shard is there); :func:`conversion_command` is the exact
command line that converts one.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from evalsi.training._checkpoints import ModelKind

ShardedFormat = Literal["verl-fsdp", "verl-megatron", "deepspeed", "dcp"]

_RANK_SHARD = re.compile(r"^model_world_size_(\d+)_rank_(\d+)\.pt$")
_STEP = re.compile(r"(\d+)$")
_DCP_SUFFIX = ".distcp"
_SERVED_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "added_tokens.json",
    "spiece.model",
    "tiktoken.model",
    "chat_template.jinja",
    "chat_template.json",
)
"""The files besides the weights a model folder is served with (its config, tokenizer and chat template)."""
DESCRIPTIONS: dict[ShardedFormat, str] = {
    "verl-fsdp": "a verl FSDP checkpoint",
    "verl-megatron": "a verl Megatron checkpoint",
    "deepspeed": "a DeepSpeed ZeRO checkpoint",
    "dcp": "a PyTorch distributed checkpoint (torch.distributed.checkpoint)",
}


@dataclass(frozen=True)
class Sharded:
    """A sharded checkpoint found on disk: its format, its shards, and what serves the converted weights."""

    format: ShardedFormat
    shards: Path
    """The folder holding the shards: verl's ``actor/``, DeepSpeed's checkpoint folder (the one holding ``latest``),
    the DCP folder."""
    found: str
    """What was found, for messages (``2 FSDP shards model_world_size_2_rank_*.pt``)."""
    complete: bool
    """Whether every shard is there (a trainer writes them one by one)."""
    config: Path | None = None
    """The folder with ``config.json`` (and the tokenizer) the converted weights are served with, if any."""
    tag: str | None = None
    """DeepSpeed's tag (``global_step100``): the folder of this checkpoint's shards."""
    lora: bool = False
    """verl saved a LoRA actor: its merger writes the adapter to ``lora_adapter/``."""

    @property
    def description(self) -> str:
        """``a verl FSDP checkpoint`` and so on."""
        return DESCRIPTIONS[self.format]

    @property
    def kind(self) -> ModelKind:
        """What it holds once converted: a LoRA adapter, full weights (with a config), else a state dictionary."""
        if self.lora:
            return "lora"
        return "weights" if self.config is not None else "state-dict"


def find_sharded(path: Path) -> Sharded | None:
    """The sharded checkpoint in ``path`` (or in a sub-folder trainers put it in), complete or not; None if none."""
    if not path.is_dir():
        return None
    for finder in (_verl_fsdp, _verl_megatron, _deepspeed, _dcp):
        found = finder(path)
        if found is not None:
            return found
    return None


def _names(folder: Path) -> set[str]:
    try:
        return {entry.name for entry in os.scandir(folder) if entry.is_file()}
    except OSError:
        return set()


def _config_folder(*folders: Path) -> Path | None:
    for folder in folders:
        if (folder / "config.json").is_file():
            return folder
    return None


def _verl_fsdp(path: Path) -> Sharded | None:
    for folder in (path, path / "actor"):
        names = _names(folder)
        shards = {int(m.group(2)): int(m.group(1)) for n in names if (m := _RANK_SHARD.match(n))}
        if "fsdp_config.json" not in names and not shards:
            continue
        world = _world_size(folder / "fsdp_config.json") or (max(shards.values()) if shards else 0)
        present = sum(1 for rank in range(world) if shards.get(rank) == world)
        config = _config_folder(folder / "huggingface")
        complete = world > 0 and present == world and config is not None
        found = f"{present} of {world or '?'} FSDP shards (model_world_size_{world or 'W'}_rank_*.pt) and " + (
            "huggingface/" if config is not None else "no huggingface/config.json yet"
        )
        lora = (folder / "lora_train_meta.json").is_file()
        return Sharded("verl-fsdp", folder, found, complete, config, lora=lora)
    return None


def _world_size(config: Path) -> int | None:
    try:
        size = json.loads(config.read_text()).get("world_size")
    except (OSError, ValueError, AttributeError):
        return None
    return size if isinstance(size, int) and size > 0 else None


def _verl_megatron(path: Path) -> Sharded | None:
    for folder in (path, path / "actor"):
        for shards, hf in ((folder / "model" / "dist_ckpt", folder / "model" / "huggingface"),
                           (folder / "dist_ckpt", folder / "huggingface")):  # fmt: skip
            if shards.is_dir():
                complete = (shards / ".metadata").is_file()
                found = f"Megatron shards in {shards.relative_to(path)}/" + ("" if complete else " (no .metadata yet)")
                return Sharded("verl-megatron", folder, found, complete, _config_folder(hf))
    return None


def _deepspeed(path: Path) -> Sharded | None:
    names = _names(path)
    if any(n.endswith("_model_states.pt") for n in names):  # the tag folder itself (DeepSpeed's own layout)
        return _deepspeed_tag(path.parent, path.name, _config_folder(path.parent, path))
    if "latest" in names:  # a folder holding tags, as transformers saves a checkpoint under DeepSpeed
        try:
            tag = (path / "latest").read_text().strip()
        except OSError:
            tag = ""
        if tag and "/" not in tag and (path / tag).is_dir():
            return _deepspeed_tag(path, tag, _config_folder(path))
    return None


def _deepspeed_tag(checkpoint_dir: Path, tag: str, config: Path | None) -> Sharded:
    names = _names(checkpoint_dir / tag)
    models = sorted(n for n in names if n.endswith("_model_states.pt"))
    optims = sorted(n for n in names if n.endswith("_optim_states.pt"))
    latest = _latest_step(checkpoint_dir)
    step, newest = _tag_step(tag), _tag_step(latest or "")
    written = latest == tag or (step is not None and newest is not None and step <= newest)
    complete = bool(models) and bool(optims) and written
    found = f"{len(models)} *_model_states.pt and {len(optims)} *_optim_states.pt in {tag}/" + (
        "" if written else f" ({checkpoint_dir.name}/latest does not name it yet)"
    )
    return Sharded("deepspeed", checkpoint_dir, found, complete, config, tag=tag)


def _latest_step(checkpoint_dir: Path) -> str | None:
    try:
        return (checkpoint_dir / "latest").read_text().strip() or None
    except OSError:
        return None


def _tag_step(tag: str) -> int | None:
    match = _STEP.search(tag)
    return int(match.group(1)) if match else None


def _dcp(path: Path) -> Sharded | None:
    candidates = [path]
    try:
        candidates += sorted(
            Path(e.path) for e in os.scandir(path) if e.is_dir() and not e.name.startswith(("optimizer", "optim"))
        )
    except OSError:
        return None
    for folder in candidates:
        names = _names(folder)
        distcp = [n for n in names if n.endswith(_DCP_SUFFIX)]
        if not distcp and ".metadata" not in names:
            continue
        complete = ".metadata" in names and bool(distcp)
        found = f"{len(distcp)} *{_DCP_SUFFIX} files" + (
            " and .metadata" if ".metadata" in names else ", no .metadata yet"
        )
        if folder != path:
            found += f" in {folder.name}/"
        return Sharded("dcp", folder, found, complete, _config_folder(path, folder))
    return None


def conversion_command(sharded: Sharded, target: Path) -> list[str]:
    """The command line that converts ``sharded`` into ``target`` (a folder)."""
    if sharded.format in ("verl-fsdp", "verl-megatron"):
        backend = "fsdp" if sharded.format == "verl-fsdp" else "megatron"
        return ["python", "-m", "verl.model_merger", "merge", "--backend", backend,
                "--local_dir", str(sharded.shards), "--target_dir", str(target)]  # fmt: skip
    if sharded.format == "deepspeed":
        return [
            "python",
            "-m",
            "deepspeed.utils.zero_to_fp32",
            str(sharded.shards),
            str(target),
            "-t",
            str(sharded.tag),
        ]
    return ["python", "-m", "torch.distributed.checkpoint.format_utils", "dcp_to_torch", str(sharded.shards),
            str(target / "model.pt")]  # fmt: skip


def command_line(argv: list[str]) -> str:
    """A command line as it is typed."""
    return shlex.join(argv)


def served_files(folder: Path) -> list[Path]:
    """The config, tokenizer and chat-template files of a model folder (what converted weights are served with)."""
    return [folder / name for name in _SERVED_FILES if (folder / name).is_file()]
