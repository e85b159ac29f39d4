"""A tiny regression model, its data, and an evaluator that scores a saved state dictionary for real."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

INPUTS = torch.linspace(-1, 1, 64).unsqueeze(1)
TARGETS = 3 * INPUTS + 0.5


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, 8), nn.Tanh(), nn.Linear(8, 1))


def train_steps(model: nn.Module, optimizer: torch.optim.Optimizer, steps: int, lr_sign: float = 1.0) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(INPUTS), TARGETS)
        (lr_sign * loss).backward()
        optimizer.step()


@dataclass
class Outcome:
    step: int | None
    loss: float
    regressed: bool

    def log_metrics(self) -> dict[str, float]:
        return {"eval/toy/loss": self.loss}


@dataclass
class LossEvaluator:
    """Loads a state dictionary file into a fresh model and measures its loss; a loss above ``regress_above``
    regresses. Every evaluation is appended to ``journal`` (one JSON line), so another process can read them."""

    journal: Path
    regress_above: float = float("inf")
    seen: list[int | None] = field(default_factory=list)

    def evaluate(self, checkpoint: str | Path, step: int | None) -> Outcome:
        saved: dict[str, Any] = torch.load(checkpoint, weights_only=True)
        model = make_model()
        model.load_state_dict(saved["model"])
        with torch.no_grad():
            loss = float(nn.functional.mse_loss(model(INPUTS), TARGETS))
        self.seen.append(step)
        with self.journal.open("a") as handle:
            handle.write(
                json.dumps({"step": step, "checkpoint": str(checkpoint), "loss": loss, "saved_step": saved["step"]})
                + "\n"
            )
        return Outcome(step, loss, loss > self.regress_above)
