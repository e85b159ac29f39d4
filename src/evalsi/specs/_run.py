"""The ``RunSpec`` resource: generate completions from a target over a dataset, score them, report statistics.

Example::

    apiVersion: evals.si/v1alpha1
    kind: RunSpec
    metadata: {name: math500-qwen}
    spec:
      target: {baseUrl: http://localhost:8000/v1, model: Qwen/Qwen3-8B, apiKeyEnv: OPENAI_API_KEY}
      sampling: {temperature: 0.6, maxTokens: 3000}
      dataset: {builtin: math500}
      samples: 8
      passK: {atK: {metrics: [math-equiv], k: [1, 4, 8]}, powK: {metrics: [math-equiv], k: [4]}}
      gates: [{metric: math-equiv, min: 0.5}]
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from evalsi.specs._model import SpecModel as _Model
from evalsi.specs._reward import ComponentSpec, OnError

Api = Literal["chat", "completions"]
BuiltinEval = Literal["math500", "aime_2024", "aime_2025", "gpqa_diamond"]
BUILTIN_EVALS: tuple[str, ...] = ("math500", "aime_2024", "aime_2025", "gpqa_diamond")
"""The built-in evals a RunSpec's dataset may name."""
DataFormat = Literal["jsonl", "json", "csv", "parquet"]


class TargetSpec(_Model):
    """What generates completions: an OpenAI-compatible endpoint, or an in-process Python callable."""

    base_url: str | None = None
    """The endpoint's base URL, such as ``http://localhost:8000/v1`` (vLLM, SGLang, OpenAI...)."""
    base_urls: list[str] | None = Field(default=None, min_length=1)
    """Several replicas of one model (vLLM data-parallel, one server per GPU), instead of ``baseUrl``: each request
    goes to the replica with the fewest requests in flight, and one that fails (refuses the connection, times out,
    answers 5xx) is set aside for a while and the request sent to another at once."""
    model: str | None = None
    """The ``model`` sent with each request (a served model name or a LoRA adapter's name)."""
    api: Api = "chat"
    """``chat`` (``/chat/completions``, messages) or ``completions`` (``/completions``, raw text prompts)."""
    api_key_env: str | None = None
    """The environment variable holding the API key (never the key itself); none sends no key."""
    callable: str | None = None
    """``module:function``: an in-process model, called as ``fn(prompt)`` (or with ``n`` and ``sampling``)."""
    max_concurrency: int = Field(default=32, ge=1)
    """Requests in flight at once (over all replicas); as many connections are kept open to each."""
    timeout: float = Field(default=600.0, gt=0)
    """Seconds one request may take before it is retried."""
    max_retries: int = Field(default=5, ge=0)
    """Retries of a request after 408, 409, 425, 429, 500, 502, 503, 504, a timeout or a dropped connection."""
    retry_backoff: float = Field(default=1.0, ge=0)
    """Seconds before the first retry; doubled each retry, capped at 30 s; a ``Retry-After`` header wins."""
    samples_per_request: int | None = Field(default=None, ge=1)
    """At most this many completions (``n``) per request; none asks for all of a record's samples at once."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra HTTP headers sent with every request."""

    @model_validator(mode="after")
    def _one_kind(self) -> TargetSpec:
        if self.base_url is not None and self.base_urls is not None:
            raise ValueError("give baseUrl (one server) or baseUrls (its replicas), not both")
        if self.callable is not None:
            if self.base_url is not None or self.base_urls is not None:
                raise ValueError("give either baseUrl (an endpoint) or callable (in-process), not both")
            if ":" not in self.callable:
                raise ValueError(f"callable must be 'module:function', got {self.callable!r}")
        elif (self.base_url is None and self.base_urls is None) or self.model is None:
            raise ValueError(
                "a target needs baseUrl and model (an OpenAI-compatible endpoint; baseUrls: its replicas), or callable"
            )
        for index, url in enumerate(self.base_urls or ()):
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"baseUrls[{index}] must be an http:// or https:// URL, got {url!r}")
        if self.base_urls is not None and len(set(self.base_urls)) != len(self.base_urls):
            raise ValueError("baseUrls lists a replica twice")
        return self

    def endpoints(self) -> list[str]:
        """The base URLs requests go to: ``baseUrls``, else ``[baseUrl]`` (empty for a callable)."""
        if self.base_urls is not None:
            return list(self.base_urls)
        return [self.base_url] if self.base_url is not None else []


class SamplingSpec(_Model):
    """Sampling params sent with each request; unset ones are left to the server."""

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: list[str] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    """Further request fields passed as they are (``top_k``, ``min_p``, ``chat_template_kwargs``...)."""

    def request_fields(self) -> dict[str, Any]:
        """The fields to merge into a request body (OpenAI spelling, unset ones left out)."""
        body: dict[str, Any] = {k: v for k, v in self.model_dump(exclude={"extra"}, exclude_none=True).items()}
        body.update(self.extra)
        return body


class FieldMap(_Model):
    """Which dataset columns hold the prompt, the reference and the record id."""

    prompt: str = "prompt"
    """The column with the prompt: text, or chat messages."""
    reference: str | None = None
    """The column with the reference; default: the first of reference, ground_truth, answer, solution,
    label."""
    id: str | None = None
    """The column that identifies a record for pairing across runs; default ``id`` when present."""


class DatasetSpec(_Model):
    """Where the records come from: a built-in eval, a local file, or a Hugging Face dataset."""

    builtin: BuiltinEval | None = None
    """A built-in eval with its own loader, prompt and evaluators: math500, aime_2024, aime_2025,
    gpqa_diamond."""
    path: str | None = None
    """A JSONL, JSON, CSV or Parquet file (relative to the spec file); for a built-in eval, a local copy."""
    hf: str | None = None
    """A Hugging Face dataset name (needs the ``datasets`` package)."""
    subset: str | None = None
    """The Hugging Face config name."""
    split: str | None = None
    """The Hugging Face split (default ``test``; built-in evals know their own)."""
    format: DataFormat | None = None
    """The file format, when the file's extension does not say."""
    fields: FieldMap = Field(default_factory=FieldMap)
    prompt_template: str | None = None
    """A ``str.format`` template over the row's columns, e.g. ``"{question}\\nAnswer:"``."""
    system_prompt: str | None = None
    """A system message put before a text prompt (chat targets)."""

    @model_validator(mode="after")
    def _one_source(self) -> DatasetSpec:
        if self.builtin is None and (self.path is None) == (self.hf is None):
            raise ValueError("give one of builtin, path (a local file) or hf (a Hugging Face dataset)")
        if self.builtin is not None and self.hf is not None:
            raise ValueError("a built-in eval knows its dataset; give path (a local copy), not hf")
        source = "a built-in eval" if self.builtin is not None else "a local file" if self.path else "hf"
        for name in sorted(self.model_fields_set & _NOT_FOR.get(source, frozenset())):
            alias = type(self).model_fields[name].alias or name
            raise ValueError(f"{alias} does not apply to {source} ({_WHY_NOT[source]}); remove it")
        return self


_NOT_FOR: dict[str, frozenset[str]] = {
    "a built-in eval": frozenset({"fields", "prompt_template", "format", "split", "subset"}),
    "a local file": frozenset({"split", "subset"}),
    "hf": frozenset({"format"}),
}
"""Dataset fields that one kind of source would accept and never read."""
_WHY_NOT = {
    "a built-in eval": "it has its own columns, prompt format and splits",
    "a local file": "split and subset choose part of a Hugging Face dataset",
    "hf": "format is a local file's",
}


class RunEvaluatorSpec(ComponentSpec):
    """An evaluator of a RunSpec: a RewardSpec component less what only a total means.

    A run reports each evaluator's mean, so ``weight`` (a share of a total), ``gate`` (a run's gates are
    ``spec.gates``) and a component's ``onError`` (a run's is ``spec.onError``) would be accepted and never read:
    they are refused, naming what to write instead. ``threshold`` stays: it decides pass@k's correct samples.
    """

    @field_validator("weight", "gate", "on_error")
    @classmethod
    def _no_total_in_a_run(cls, value: object, info: ValidationInfo) -> object:
        raise ValueError(_RUN_COMPONENT_HINTS[str(info.field_name)])


_RUN_COMPONENT_HINTS = {
    "weight": "a run reports each evaluator's mean and has no total to weigh it in; remove weight "
    "(weights belong to a RewardSpec's components)",
    "gate": "a run's gates are spec.gates: [{metric: NAME, min: 0.5}]; remove gate here",
    "on_error": "a run counts errored scores by spec.onError (zero, none or raise); set it there",
}


class KSpec(_Model):
    """Which metrics get pass@k (or pass^k), for which ``k``."""

    metrics: list[str] = Field(min_length=1)
    """Evaluator (component) names; a sample counts as correct when it reaches the component's threshold."""
    k: list[int] = Field(min_length=1)

    @model_validator(mode="after")
    def _positive(self) -> KSpec:
        if any(k < 1 for k in self.k):
            raise ValueError(f"every k must be at least 1, got {self.k}")
        return self


class PassKSpec(_Model):
    """pass@k (at least one of k correct) and pass^k (all k correct)."""

    at_k: KSpec | None = None
    pow_k: KSpec | None = None

    @property
    def max_k(self) -> int:
        """The largest k asked for (0 when none)."""
        return max([*(self.at_k.k if self.at_k else []), *(self.pow_k.k if self.pow_k else []), 0])


class GateSpec(_Model):
    """A threshold on a metric: the run fails (exit 3) when the metric is outside ``[min, max]``."""

    metric: str
    """A component name (its mean), or ``pass@K/<component>``, ``pass^K/<component>``."""
    min: float | None = None
    max: float | None = None

    @model_validator(mode="after")
    def _bounded(self) -> GateSpec:
        if self.min is None and self.max is None:
            raise ValueError("a gate needs min, max, or both")
        return self


LoggerName = Literal["tensorboard", "mlflow", "wandb"]
LOGGER_NAMES: tuple[str, ...] = ("tensorboard", "mlflow", "wandb")
"""The loggers a RunSpec's ``loggers:`` section and ``--log-to`` may name."""


class TensorBoardLoggerSpec(_Model):
    """TensorBoard: event files written under ``dir`` (``evalsi[tensorboard]``)."""

    dir: str | None = None
    """The log directory (relative to the spec file); default ``evalsi-logs/tensorboard`` in the current
    directory. Each run (or training run) writes to its own subdirectory."""


class MlflowLoggerSpec(_Model):
    """MLflow: a tracking run per run (or training run) (``evalsi[mlflow]``)."""

    tracking_uri: str | None = None
    """The tracking server or store; default ``$MLFLOW_TRACKING_URI`` (else MLflow's own default)."""
    experiment: str | None = None
    """The experiment's name; default ``$MLFLOW_EXPERIMENT_NAME``, else ``evalsi``."""


class WandbLoggerSpec(_Model):
    """Weights & Biases: a W&B run per run (or training run) (``evalsi[wandb]``)."""

    project: str | None = None
    """The project; default ``$WANDB_PROJECT``, else ``evalsi``."""
    entity: str | None = None
    """The team or user; default W&B's own (``$WANDB_ENTITY``)."""
    mode: Literal["online", "offline"] | None = None
    """``offline`` keeps the run on disk (``wandb sync`` uploads it later); default ``$WANDB_MODE``, else
    online."""
    dir: str | None = None
    """Where W&B keeps its files (relative to the spec file); default W&B's own (``$WANDB_DIR``)."""


class LoggersSpec(_Model):
    """Where a run's results are also logged; ``--log-to`` adds loggers with their default settings."""

    tensorboard: TensorBoardLoggerSpec | None = None
    mlflow: MlflowLoggerSpec | None = None
    wandb: WandbLoggerSpec | None = None

    def named(self) -> dict[str, _Model]:
        """Logger name -> its settings, for the loggers this section turns on."""
        return {n: v for n in LOGGER_NAMES if (v := getattr(self, n)) is not None}


class RunSpecBody(_Model):
    """The ``spec`` of a RunSpec."""

    target: TargetSpec
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    dataset: DatasetSpec
    samples: int = Field(default=1, ge=1)
    """Completions generated per record (OpenAI's ``n``). With ``passK`` and no explicit value, the largest k.
    Not the number of records: that is ``numSamples``."""
    num_samples: int = Field(default=-1, ge=-1)
    """How many dataset records to evaluate (the first ones); -1 for all. Not the completions per record: that is
    ``samples``."""
    evaluators: list[RunEvaluatorSpec] = Field(default_factory=list)
    """Components as in a RewardSpec, less ``weight``, ``gate`` and ``onError``; a built-in eval brings its own when
    none are given."""
    pass_k: PassKSpec = Field(default_factory=PassKSpec)
    gates: list[GateSpec] = Field(default_factory=list)
    every: int | None = Field(default=None, ge=1)
    """Training only (``evalsi run`` ignores it): evaluate checkpoints at the steps N divides, and always the base
    and the final step; at a step no spec is due at, the checkpoint is not served."""
    separate_eval_samples: bool = False
    """Training only: the dataset is also training data, and the records this run evaluates are set aside from
    training (``evalsi.training.exclude_eval_samples`` drops them from a training dataset), so an evaluation
    never scores what the model trained on."""
    on_error: OnError = "zero"
    """An errored score counts as 0 (``zero``), is left out of the means (``none``), or fails the run
    (``raise``)."""
    output: str | None = None
    """The results file, relative to the spec file like its other paths (default ``<name>.results.json`` in the
    current directory)."""
    batch_size: int = Field(default=64, ge=1)
    """Records scored per engine call."""
    loggers: LoggersSpec = Field(default_factory=LoggersSpec)
    """Also log the results to TensorBoard, MLflow or W&B: each metric's mean and 95% interval at the
    checkpoint's step (0 for ``evalsi run`` and the base model), the per-record table, the results file's path."""

    @model_validator(mode="after")
    def _samples_cover_k(self) -> RunSpecBody:
        if self.num_samples == 0:
            raise ValueError("numSamples must be -1 (all records) or a positive count")
        max_k = self.pass_k.max_k
        if max_k > self.samples:
            if "samples" in self.model_fields_set:
                raise ValueError(f"passK asks for k={max_k} but samples is {self.samples}; need samples >= k")
            object.__setattr__(self, "samples", max_k)  # pass@k needs max(k) completions per record
        if not self.evaluators and self.dataset.builtin is None:
            raise ValueError("evaluators is required (only a built-in eval brings its own)")
        if self.dataset.system_prompt is not None and self.target.api == "completions":
            raise ValueError(
                "dataset.systemPrompt is sent as a chat message, which target.api: completions never sends; "
                "put it in dataset.promptTemplate, or use api: chat"
            )
        return self


_SAMPLE_COUNT_NAMES = frozenset(
    {
        "n", "nsamples", "numsamples", "samples", "maxsamples", "numcompletions", "ncompletions", "completions",
        "numreturnsequences", "bestof", "epochs", "repeats", "numrepeats", "limit", "numrecords", "records",
        "numexamples", "examples", "numrows", "maxrows",
    }
)  # fmt: skip
"""Unknown RunSpec fields (lower case, without ``_`` and ``-``) that are most likely one of the two counts."""


def sample_count_hint(field: str) -> str:
    """What ``numSamples`` and ``samples`` mean, for an unknown RunSpec field that looks like either; else ``""``.

    ``n`` (OpenAI), ``num_samples`` under ``sampling``, ``limit`` (lm-evaluation-harness, inspect_ai) or ``epochs``
    (inspect_ai) each mean one of the two counts elsewhere, so the error says which field means what.
    """
    if field.replace("_", "").replace("-", "").lower() not in _SAMPLE_COUNT_NAMES:
        return ""
    return (
        " (spec.numSamples: how many dataset records are evaluated, the first N or -1 for all; spec.samples: how "
        "many completions are generated per record, OpenAI's n)"
    )


class RunSpec(BaseModel):
    """A parsed RunSpec resource: its name and body (evaluators not bound yet)."""

    model_config = ConfigDict(frozen=True)

    name: str
    spec: RunSpecBody
    source: str | None = None
    """The file it was loaded from, when it came from a file."""
