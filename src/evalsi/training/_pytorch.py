"""Plain PyTorch loops: save a state dictionary atomically, then have it evaluated (in the background by default).

``hook.save(model, "checkpoints/step-100.pt", 100, optimizer=optimizer)`` writes ``{"model", "step"[, "optimizer"]}``
to a temporary file beside the target and renames it into place, so an evaluator (or a watcher in another pod)
never reads half a file. The file gets the mode the umask gives any new file. Under distributed training every
rank may call ``save``; only rank zero saves and evaluates. Use a unique path per step. torch is imported when
``save`` is called.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from evalsi.training._runner import CheckpointRunner, Evaluator, Submitted


class PyTorchCheckpointHook:
    """Saves state dictionaries atomically and evaluates each one with a :class:`CheckpointRunner`.

    Use as a context manager: leaving it waits for pending evaluations.
    """

    def __init__(self, evaluator: Evaluator, *, wait: bool = False) -> None:
        self.runner = CheckpointRunner(evaluator, wait=wait)

    def save(self, model: Any, path: str | Path, step: int, *, optimizer: Any = None) -> Submitted | None:
        """Publish ``model``'s state dictionary at ``path`` and submit it for evaluation (rank zero only)."""
        import torch
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return None
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        state: dict[str, Any] = {"model": model.state_dict(), "step": step}
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(state, handle)
                handle.flush()
                os.fsync(handle.fileno())
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return self.runner.submit(target, step)

    def __enter__(self) -> PyTorchCheckpointHook:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.runner.drain()
