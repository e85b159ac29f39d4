"""Scoring functions built from specs, so the spec that makes an RL reward is also the CI check.

A RewardSpec scores each rollout with its total; a RunSpec with the mean of its evaluators' values, and brings its
dataset and endpoint target as the test's inputs. Scores are clipped to [0, 1]; a rollout without a score (no
total, every evaluator skipped) scores 0 and says why.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalsi.errors import SpecError
from evalsi.rewards import Reward, RewardResult
from evalsi.rewards import load as load_reward
from evalsi.runs import load_run
from evalsi.runs._driver import load_run_items
from evalsi.specs import load_resources
from evalsi.testing._row import EvaluationRow


def spec_scorer(
    path: Path, name: str | None
) -> tuple[Callable[[list[EvaluationRow]], list[EvaluationRow]], dict[str, Any]]:
    """An ``all``-mode scoring function for the spec in ``path``, and the inputs it brings (RunSpec).

    Raises:
        SpecError: The file holds neither a RewardSpec nor a RunSpec, or the spec is invalid.

    """
    kinds = {r.kind for r in load_resources(path)}
    if "RewardSpec" in kinds:
        reward = load_reward(path, name)
        return _scorer(reward, lambda result: result.total, f"spec_{_ident(reward.name)}"), {}
    if "RunSpec" in kinds:
        run = load_run(path, name)
        items = load_run_items(run)
        rows = [
            EvaluationRow(
                [{"role": "user", "content": item.prompt}]
                if isinstance(item.prompt, str)
                else [dict(m) for m in item.prompt],
                item.reference,
                item.key,
                metadata=dict(item.metadata),
                source=f"{run.spec.name} record {item.index}",
                dataset_id=None if item.id is None else item.key,
            )
            for item in items
        ]
        defaults: dict[str, Any] = {"input_rows": rows}
        target = run.body.target
        if target.base_url is not None:
            params = {"model": target.model, "base_url": target.base_url}
            if target.api_key_env:
                params["api_key_env"] = target.api_key_env
            params.update(run.body.sampling.request_fields())
            defaults["completion_params"] = [params]
        return _scorer(run.reward, _mean_of_components, f"spec_{_ident(run.spec.name)}"), defaults
    raise SpecError(f"holds no RewardSpec or RunSpec (kinds: {', '.join(sorted(kinds)) or 'none'})", file=str(path))


def _mean_of_components(result: RewardResult) -> float | None:
    values = [float(s.value) for s in result.components.values() if s.status == "ok" and s.value is not None]
    return sum(values) / len(values) if values else None


def _scorer(
    reward: Reward, value_of: Callable[[RewardResult], float | None], name: str
) -> Callable[[list[EvaluationRow]], list[EvaluationRow]]:
    def score(rows: list[EvaluationRow]) -> list[EvaluationRow]:
        rollouts = [
            {
                **row.metadata,
                "prompt": [m for m in row.messages[:-1]] or row.messages,
                "completion": row.last_text,
                "reference": row.ground_truth,
            }
            for row in rows
        ]
        for row, result in zip(rows, reward.score(rollouts), strict=True):
            value = value_of(result)
            row.score = 0.0 if value is None else min(max(float(value), 0.0), 1.0)
            row.reason = "; ".join(
                f"{n}: {s.status} {s.value}" + (f" ({s.reason})" if s.reason else "")
                for n, s in result.components.items()
            )
            row.metrics = {
                n: float(s.value) for n, s in result.components.items() if s.status == "ok" and s.value is not None
            }
        return rows

    score.__name__ = score.__qualname__ = name
    return score


def _ident(text: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in text)
