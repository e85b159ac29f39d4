"""Converting a sharded checkpoint into something a server loads, once, into a cache beside the step results.

The conversion runs each format's own tool in a child process (the Python running evalsi), so the trainer's
library does the merging it knows: verl's model merger for verl FSDP actors, DeepSpeed's ``zero_to_fp32`` for
ZeRO, ``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` for DCP. Its output goes to a temporary
folder renamed into place when the tool succeeded, under a lock, named by the checkpoint's fingerprint: a
checkpoint is converted once, however many specs, watchers or restarts ask, and a rewritten one again. When the
tool is not installed (or, for Megatron, never run here) the error names the format found and the exact command
that converts it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evalsi._util.filelock import exclusive_lock
from evalsi.errors import EvalsiError
from evalsi.training._checkpoints import ModelFiles, find_model
from evalsi.training._sharded import Sharded, command_line, conversion_command, served_files

log = logging.getLogger(__name__)

DEFAULT_CONVERT_DIR = Path("evalsi-logs") / "converted"
"""Where conversions go unless told: ``converted/`` of the default log directory."""
_TOOLS = {"verl-fsdp": "verl", "deepspeed": "deepspeed", "dcp": "torch"}
"""The package each format's converter comes with (``verl-megatron`` has none evalsi runs)."""
_LOG_TAIL = 3000

# The DCP conversion, with the state dictionary then laid out as a Hugging Face folder's weights when the
# checkpoint has a config to serve them with: the model's entries of {"model": ...} as training loops save them.
_DCP_SCRIPT = """
import sys, torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
source, target, flat = sys.argv[1], sys.argv[2], sys.argv[3]
dcp_to_torch_save(source, target)
if flat:
    state = torch.load(target, map_location="cpu", weights_only=True)
    for key in ("model", "state_dict", "module"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    torch.save(state, flat)
    import os
    os.remove(target)
"""


class ConversionError(EvalsiError, RuntimeError):
    """A sharded checkpoint could not be converted: its converter is not installed here, or it failed."""


def convert_checkpoint(files: ModelFiles, name: str, fingerprint: str, cache_dir: Path) -> ModelFiles:
    """What ``files`` (a sharded checkpoint's) become once converted, converting them unless already done.

    Args:
        files: A sharded checkpoint's files (``files.sharded`` set), as :func:`find_model` gives them.
        name: The checkpoint's name (``global_step_100``), for the cache folder.
        fingerprint: A digest of the checkpoint's files: a rewritten checkpoint is converted again.
        cache_dir: Where conversions are kept.

    Raises:
        ConversionError: The converter is not installed (the message gives the command that converts it) or
            failed (with the end of its output, kept in a ``.log`` file beside the conversion).

    """
    sharded = files.sharded
    if sharded is None:
        return files
    target = cache_dir / f"{_safe(name)}-{fingerprint[:12] or 'x'}"
    done = _converted(sharded, target)
    if done is not None:
        return done
    cache_dir.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(cache_dir / f".{target.name}.lock"):
        done = _converted(sharded, target)
        if done is not None:  # another process converted it while this one waited
            return done
        _require_tool(sharded, target)
        for stale in cache_dir.glob(f".{target.name}.*.partial"):  # left by a conversion that died (it held the lock)
            shutil.rmtree(stale, ignore_errors=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=cache_dir))
        try:
            _run(sharded, partial, cache_dir / f"{target.name}.log")
            os.rename(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    log.info("converted %s (%s) into %s", sharded.shards, sharded.description, target)
    converted = _converted(sharded, target)
    if converted is None:
        raise ConversionError(f"{sharded.shards}: the conversion into {target} left no model there")
    return converted


def _converted(sharded: Sharded, target: Path) -> ModelFiles | None:
    if not target.is_dir():
        return None
    if sharded.lora and (target / "lora_adapter").is_dir():
        return find_model(target / "lora_adapter")
    found = find_model(target)
    if found is not None:
        return found
    for name in ("model.pt", "pytorch_model.bin"):  # a state dictionary, for a checkpoint without a config
        if (target / name).is_file():
            return ModelFiles("state-dict", target / name)
    return None


def _require_tool(sharded: Sharded, target: Path) -> None:
    command = command_line(conversion_command(sharded, target))
    tool = _TOOLS.get(sharded.format)
    if tool is None:
        raise ConversionError(
            f"{sharded.shards} is {sharded.description} ({sharded.found}), which evalsi does not convert itself "
            f"(verl's Megatron merger needs Megatron-Core, and often GPUs). Convert it with:\n  {command}\n"
            f"(add --tie-word-embedding if the model ties its embeddings), then evaluate {target}"
        )
    if importlib.util.find_spec(tool) is None:
        raise ConversionError(
            f"{sharded.shards} is {sharded.description} ({sharded.found}); converting it needs {tool}, which is not "
            f"installed here (pip install {tool}). Or convert it yourself:\n  {command}\n"
            f"then evaluate {target}"
        )


def _run(sharded: Sharded, partial: Path, log_path: Path) -> None:
    argv = conversion_command(sharded, partial)
    argv[0] = sys.executable
    if sharded.format == "dcp":
        flat = str(partial / "pytorch_model.bin") if sharded.config is not None else ""
        argv = [sys.executable, "-c", _DCP_SCRIPT, str(sharded.shards), str(partial / "model.pt"), flat]
    with log_path.open("wb") as out:
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False)
        except OSError as exc:
            raise ConversionError(f"cannot start {command_line(argv)}: {exc}") from None
    if done.returncode != 0:
        raise ConversionError(
            f"converting {sharded.shards} ({sharded.description}) failed: {command_line(argv)} exited with "
            f"{done.returncode}; the end of {log_path}:\n{_tail(log_path)}"
        )
    if sharded.format != "verl-fsdp" and sharded.config is not None:
        for source in served_files(sharded.config):  # the config and tokenizer the weights are served with
            if not (partial / source.name).exists():
                shutil.copy2(source, partial / source.name)


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-_LOG_TAIL:]
    except OSError:
        return "(no output)"
    return data.decode("utf-8", "replace").strip() or "(no output)"


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-") or "checkpoint"
