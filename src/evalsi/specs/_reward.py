"""The ``RewardSpec`` resource: components composed into one reward per rollout (see ``evalsi.rewards``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from evalsi._util.isolation import Isolation
from evalsi.specs._model import SpecModel as _Model

OnError = Literal["raise", "zero", "none"]
"""What an errored component does: ``raise`` (the default) fails the whole batch, ``zero`` counts it as 0, and
``none`` gives the rollout no total."""


class SandboxSpec(_Model):
    """Where a code-running component may run."""

    min_isolation: Isolation = "namespaced"
    """The lowest isolation rung allowed; it becomes the component's ``min_isolation`` param."""


class CacheSpec(_Model):
    """The content cache of component scores."""

    enabled: bool = True
    """Cache component scores by content (evaluator, params, the fields it reads)."""
    max_entries: int = Field(default=1_048_576, ge=0)
    """Bound of the in-process LRU; the least recently used scores are evicted past it."""


class ComponentSpec(_Model):
    """One component: an evaluator with its params, weight and gate."""

    ref: str
    """The evaluator's registered name (``evalsi evaluators list``)."""
    name: str | None = None
    """The component's name in breakdowns and metrics; defaults to ``ref``."""
    weight: float = Field(default=1.0, allow_inf_nan=False)
    """The component adds ``weight × value`` to the total (pass/fail counts as 1 or 0)."""
    gate: bool = False
    """A gate must score at least ``threshold``; a failed, skipped or errored gate makes the total ``floor``."""
    threshold: float = Field(default=1.0, allow_inf_nan=False)
    """The least value that passes a gate (in a RunSpec: that makes a sample correct for pass@k)."""
    on_error: OnError | None = None
    """What an error means: ``raise`` fails the batch, ``zero`` counts 0, ``none`` gives no total.
    Inherits the spec's ``onError``."""
    params: dict[str, Any] = Field(default_factory=dict)
    """The evaluator's params (``evalsi evaluators describe REF``)."""
    sandbox: SandboxSpec | None = None
    """For components that run code: ``{minIsolation: process | namespaced | gvisor}``."""
    judge: str | dict[str, Any] | None = None
    """In-process: JudgeConfig fields; on a server: the name of a judge configured there."""

    @property
    def display_name(self) -> str:
        """The component's name, defaulting to its ``ref``."""
        return self.name or self.ref

    @field_validator("name")
    @classmethod
    def _name_is_usable(cls, value: str | None) -> str | None:
        if value is not None and (not value or value == "score" or "/" in value):
            raise ValueError("a component name must be non-empty, not 'score', and contain no '/'")
        return value


class RewardSpecBody(_Model):
    """The ``spec`` of a RewardSpec."""

    components: list[ComponentSpec] = Field(min_length=1)
    """The components, in the order they are reported."""
    floor: float = Field(default=0.0, allow_inf_nan=False)
    """The total when a gate fails, is skipped or errors."""
    clip: tuple[float, float] | None = None
    """``[low, high]``: bounds the total, last."""
    on_error: OnError = "raise"
    """The default ``onError`` of components."""
    cache: CacheSpec = Field(default_factory=CacheSpec)
    reference_field: str | None = None
    """The rollout field that holds the reference, instead of the first of reference, ground_truth, answer,
    solution, label."""

    @field_validator("components", mode="before")
    @classmethod
    def _thresholds_belong_to_gates(cls, value: Any) -> Any:
        for index, item in enumerate(value if isinstance(value, list) else []):
            if isinstance(item, dict) and "threshold" in item and not item.get("gate"):
                raise ValueError(
                    f"components[{index}].threshold is a gate's pass mark, and this component is no gate: "
                    "set gate: true, or remove threshold"
                )
        return value

    @field_validator("clip")
    @classmethod
    def _clip_is_ordered(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and value[0] > value[1]:
            raise ValueError(f"clip must be [low, high] with low <= high, got [{value[0]}, {value[1]}]")
        return value


class RewardSpec(BaseModel):
    """A parsed RewardSpec resource: its name and body (the components are not bound to evaluators yet)."""

    model_config = ConfigDict(frozen=True)

    name: str
    spec: RewardSpecBody
    source: str | None = None
    """The file it was loaded from, when it came from a file."""
