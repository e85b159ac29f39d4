"""``JudgeConfig``: which model judges, what it is asked, and how its verdict becomes a score.

A component's ``judge`` is these fields in-process. On an evalsi server it may instead be the name of a judge
configured there, which the server replaces with that judge's fields before binding the spec. In-process, a name
is an error that says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator

from evalsi.evaluators._operator import OPERATOR_ONLY
from evalsi.evaluators._patterns import compile_pattern
from evalsi.evaluators.judge._template import FIXED_FIELDS, placeholders
from evalsi.specs._model import SpecModel as _Model

DEFAULT_NUMBER_PATTERN = r"(?im)^[\W_]*(?:final\s+)?(?:score|rating|grade)\s*[:=]\s*\**\s*(-?\d+(?:\.\d+)?)"
"""A line such as ``Score: 7`` or ``**Final score:** 7.5``; the last such line counts."""


def _check_pattern(value: str | None) -> str | None:
    if value is not None:
        compiled = compile_pattern(value)  # linear-time engine: a judge reply cannot stall the scorer
        if compiled.groups < 1:
            raise ValueError("the pattern needs a capturing group around the verdict, e.g. 'Score: (\\d+)'")
    return value


class NumberVerdict(_Model):
    """The verdict is a number in ``[min, max]``, found by ``pattern`` (default: a ``Score: N`` line)."""

    kind: Literal["number"] = "number"
    min: float = 0.0
    """The lowest score the judge may give."""
    max: float = 10.0
    """The highest score the judge may give."""
    pattern: str | None = None
    """A regex whose first group captures the number (the last match counts); default: a ``Score: N`` line,
    else a reply that is just a number. A number outside ``[min, max]`` is an error, not clipped."""
    rescale: bool = True
    """Map ``[min, max]`` onto ``[0, 1]``."""

    _pattern = field_validator("pattern")(_check_pattern)

    @model_validator(mode="after")
    def _ordered(self) -> NumberVerdict:
        if not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        return self


class LabelVerdict(_Model):
    """The verdict is one of ``labels``, each mapped to a score; the label mentioned last counts."""

    kind: Literal["label"] = "label"
    labels: dict[str, float] = Field(min_length=1)
    """Label → score, e.g. ``{"CORRECT": 1, "PARTIAL": 0.5, "INCORRECT": 0}``."""
    pattern: str | None = None
    """A regex whose first group captures where the label is (the last match counts); default: the whole reply."""
    ignore_case: bool = True
    """Match labels case-insensitively."""

    _pattern = field_validator("pattern")(_check_pattern)

    @field_validator("labels")
    @classmethod
    def _non_empty(cls, value: dict[str, float]) -> dict[str, float]:
        if any(not label.strip() for label in value):
            raise ValueError("a label must be non-empty text")
        return value


class JsonVerdict(_Model):
    """The verdict is a JSON object (bare, fenced, or embedded in the reply); ``field`` holds the score."""

    kind: Literal["json"] = "json"
    field: str = "score"
    """The field with the verdict; a dotted path reaches into nested objects (``verdict.score``)."""
    min: float | None = None
    """With ``max``: a numeric verdict must lie in ``[min, max]`` and is rescaled onto ``[0, 1]``."""
    max: float | None = None
    labels: dict[str, float] | None = None
    """A string verdict is looked up here (case-insensitively). Booleans count 1 or 0."""
    json_mode: bool = False
    """Ask the endpoint for a JSON object (``response_format: {"type": "json_object"}``)."""

    @model_validator(mode="after")
    def _range(self) -> JsonVerdict:
        if (self.min is None) != (self.max is None):
            raise ValueError("give both min and max, or neither")
        if self.min is not None and self.max is not None and not self.min < self.max:
            raise ValueError(f"min ({self.min:g}) must be below max ({self.max:g})")
        return self


Verdict = Annotated[NumberVerdict | LabelVerdict | JsonVerdict, Field(discriminator="kind")]


class JudgeConfig(_Model):
    """A generative judge behind any OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    model: str = Field(min_length=1)
    """The model name sent to the endpoint."""
    base_url: str = Field(default="https://api.openai.com/v1", pattern=r"^https?://", json_schema_extra=OPERATOR_ONLY)
    """The OpenAI-compatible base URL (``…/v1``); requests go to ``{base_url}/chat/completions``."""
    api_key_env: str | None = Field(default="OPENAI_API_KEY", json_schema_extra=OPERATOR_ONLY)
    """The environment variable holding the API key (sent as a bearer token; none when unset or empty)."""
    system: str | None = None
    """An optional system message."""
    template: str | None = None
    """The user message, with ``{{prompt}}``, ``{{completion}}``, ``{{reference}}``, ``{{rubric}}``,
    ``{{format}}`` (how to answer, from ``verdict``) and ``{{metadata.KEY}}`` or ``{{KEY}}`` for any other
    rollout field. Default: a grading prompt with the rubric, the question, the reference when there is one,
    and the response."""
    rubric: str = ""
    """What a good response is; fills ``{{rubric}}``."""
    verdict: Verdict = Field(default_factory=NumberVerdict)
    """How the reply becomes a score: ``{kind: number, min, max}``, ``{kind: label, labels}`` or
    ``{kind: json, field}``. A reply it cannot read is an error score with the reply in the details."""
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int | None = Field(default=1024, gt=0)
    """Most tokens the judge may write (``None``: the endpoint's default)."""
    retries: int = Field(default=3, ge=0, le=20)
    """Further attempts after a timeout, a connection failure, or 408, 409, 425, 429, 500, 502, 503, 504."""
    backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first retry, doubling each time (a ``Retry-After`` header takes precedence)."""
    max_concurrency: int = Field(default=8, ge=1, le=1024)
    """Most requests in flight to this endpoint at once, across every caller in this process."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds per HTTP attempt."""
    extra_body: dict[str, Any] = Field(default_factory=dict, json_schema_extra=OPERATOR_ONLY)
    """Extra request fields (e.g. ``{"seed": 0}`` or ``{"top_p": 1}``)."""

    @field_validator("verdict", mode="before")
    @classmethod
    def _infer_kind(cls, value: Any) -> Any:
        # `kind` may be left out when the other fields say it: labels alone → label, a field → json.
        if isinstance(value, Mapping) and "kind" not in value:
            kind = "json" if "field" in value or "jsonMode" in value or "json_mode" in value else None
            kind = kind or ("label" if "labels" in value else "number")
            return {**value, "kind": kind}
        return value

    @field_validator("template")
    @classmethod
    def _known_placeholders(cls, value: str | None) -> str | None:
        if value is not None:
            names = placeholders(value)
            if not names & {"completion", "prompt"}:
                raise ValueError(
                    "the template shows the judge neither {{completion}} nor {{prompt}}; "
                    f"fields it can use: {', '.join(sorted(FIXED_FIELDS))}, metadata.KEY"
                )
        return value


def resolve_judge(value: Any) -> Any:
    """A ``judge`` value ready for validation; a bare name is an error here.

    A judge's name is resolved by the evalsi server (which replaces it with the judge it configures before the
    spec is bound); in-process, the JudgeConfig fields must be given.
    """
    if not isinstance(value, str):
        return value
    raise ValueError(
        f"{value!r} names a judge configured on an evalsi server, but this is in-process scoring: give the "
        "JudgeConfig fields instead, e.g. {model: gpt-4o-mini, base_url: https://api.openai.com/v1, rubric: ...}"
    )
