"""Serving strategies: how a checkpoint becomes an OpenAI-compatible endpoint for the length of one evaluation.

The interface is small so users can supply their own: ``serve(ref)`` is a context manager that yields where to
send requests (:class:`Served`) and releases whatever it started when the block ends, on error and Ctrl-C too.

- :class:`Endpoint`: a model that is already served; nothing is started.
- :class:`LoRA`: hot-loads the checkpoint as an adapter into a running vLLM (``/v1/load_lora_adapter``) under a
  name unique to the checkpoint's files, and unloads it afterwards. vLLM keeps results cached by adapter name, so
  a reused name could answer with an earlier checkpoint's weights.
- :class:`~evalsi.training.VLLM` (``_vllm.py``) starts ``vllm serve``; ``Transformers`` (``_transformers.py``)
  serves a Hugging Face checkpoint in-process.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx

from evalsi.errors import DataError, EvalsiError
from evalsi.training._checkpoints import STATE_DICT_SUFFIXES, ModelFiles, ModelKind, find_model, parse_step, signature
from evalsi.training._convert import DEFAULT_CONVERT_DIR, convert_checkpoint
from evalsi.training._sharded import find_sharded

log = logging.getLogger(__name__)


class ServingError(EvalsiError, RuntimeError):
    """A checkpoint could not be served (a server did not start, refused an adapter, or the files do not fit)."""


class UnservableError(ServingError, DataError):
    """The checkpoint is not there, holds no model, or holds a kind the serving strategy cannot serve.

    Bad input rather than failed work (``evalsi checkpoints`` exits 2): serving it again would fail the same way.
    """


_ADVICE: dict[ModelKind, str] = {
    "weights": "serve full weights with --serve vllm or --serve transformers (Python: VLLM(), Transformers())",
    "lora": "serve a LoRA adapter with --serve lora and --base-url of a vLLM started with --enable-lora "
    "(Python: LoRA(base_url))",
    "state-dict": "a state dictionary is weights without an architecture, which vLLM cannot load: serve it with "
    "--serve transformers --base-model MODEL (Python: Transformers(base_model=...) or StateDict(model_factory))",
}
_DESCRIBED: dict[ModelKind, str] = {
    "weights": "full weights",
    "lora": "a LoRA adapter",
    "state-dict": "a state dictionary",
}
_SERVES: dict[str, tuple[ModelKind, ...]] = {
    "vllm": ("weights",),
    "lora": ("lora",),
    "transformers": ("weights", "state-dict"),
    "state-dict": ("state-dict",),
}
"""What each built-in strategy (by ``name``) serves from a checkpoint's files; ``endpoint`` serves anything."""
MODEL_FILES = (
    "config.json with model.safetensors (or the shards its index names), adapter_config.json with "
    f"adapter_model.safetensors, a state dictionary file ({', '.join(STATE_DICT_SUFFIXES)}), or every shard of a "
    "verl, DeepSpeed ZeRO or PyTorch distributed checkpoint"
)
"""What a checkpoint must hold, for messages."""


def serving_advice(kind: ModelKind) -> str:
    """How a checkpoint holding ``kind`` is served (the ``--serve`` option and the Python strategy)."""
    return _ADVICE[kind]


def check_servable(strategy: ServingStrategy, ref: ModelRef) -> None:
    """Refuse a checkpoint a built-in strategy cannot serve, before anything is started, with the way that can.

    The base model (``step`` None) may be a name the server resolves, and ``endpoint`` or your own strategies
    decide for themselves.

    Args:
        strategy: The serving strategy.
        ref: The checkpoint or base model.

    Raises:
        UnservableError: The checkpoint is not there, holds no model, or holds a kind the strategy cannot serve.

    """
    kinds = _SERVES.get(strategy.name)
    if ref.step is None or kinds is None:
        return
    if ref.files is None:
        path = Path(ref.location)
        if path.exists():
            sharded = find_sharded(path)
            if sharded is not None:  # a trainer is still writing it, or died while it did
                raise UnservableError(f"{ref.location} is {sharded.description} not complete yet: {sharded.found}")
            raise UnservableError(f"{ref.location} holds no model: a checkpoint holds {MODEL_FILES}")
        if strategy.name == "lora" or _looks_like_a_path(ref.location):
            raise UnservableError(f"{ref.location}: no such file or directory")
        return  # a model name the server resolves (vllm serve org/model)
    kind = ref.files.kind
    if kind not in kinds:
        raise UnservableError(
            f"{ref.location} holds {_DESCRIBED[kind]}, which --serve {strategy.name} cannot serve; "
            f"{serving_advice(kind)}"
        )
    if kind == "state-dict" and strategy.name == "transformers" and getattr(strategy, "base_model", None) is None:
        raise UnservableError(
            f"{ref.location} is a state dictionary: give --base-model MODEL, the model whose architecture and "
            "tokenizer it fits (Python: Transformers(base_model=...) or StateDict(model_factory))"
        )


def _looks_like_a_path(location: str) -> bool:
    """Whether a location that does not exist was meant as a local path rather than a served model's name."""
    name = Path(location).name
    return (
        location.startswith(("/", "./", "../", "~"))
        or parse_step(name) is not None
        or name.endswith(STATE_DICT_SUFFIXES)
    )


@dataclass(frozen=True)
class ModelRef:
    """What to serve: a checkpoint of a training run, or its base model (``step`` None).

    ``location`` is a local path, or for the base model a name the server knows (``Qwen/Qwen3-8B``).
    """

    location: str
    step: int | None
    training_run: str
    files: ModelFiles | None = None
    fingerprint: str = ""

    @property
    def label(self) -> str:
        """``base`` or the step number, as the curve shows it."""
        return "base" if self.step is None else str(self.step)

    @property
    def served_name(self) -> str:
        """A model name unique to this checkpoint's files: same files, same name; new files, a new name."""
        run = _safe_name(self.training_run)
        if self.step is None:
            return f"{run}-base"
        return f"{run}-step-{self.step}-{self.fingerprint[:10] or 'x'}"


def model_ref(
    location: str | Path, step: int | None, training_run: str, *, convert_dir: str | Path | None = None
) -> ModelRef:
    """A reference to a checkpoint (or base model) with what it holds and a fingerprint of its files.

    A sharded checkpoint (verl FSDP, DeepSpeed ZeRO, PyTorch DCP) is converted first, once, into
    ``convert_dir/<training run>/<checkpoint>-<fingerprint>`` (default ``evalsi-logs/converted``): the reference's
    files are the conversion's, its fingerprint the checkpoint's own.

    Args:
        location: The checkpoint's path, or the base model's name.
        step: Its training step; None for the base model.
        training_run: The training run's name.
        convert_dir: Where sharded checkpoints are converted to; None for the default.

    Raises:
        ConversionError: A sharded checkpoint's converter is not installed (the message gives the command that
            converts it) or failed.

    """
    path = Path(location)
    if path.exists():
        files = find_model(path)
        digest = signature(path).digest
        if files is not None and files.sharded is not None:
            cache = Path(convert_dir) if convert_dir is not None else DEFAULT_CONVERT_DIR
            files = convert_checkpoint(files, path.name, digest, cache / _safe_name(training_run))
        return ModelRef(str(path.resolve()), step, training_run, files, digest)
    fingerprint = hashlib.sha256(str(location).encode()).hexdigest()[:12]
    return ModelRef(str(location), step, training_run, None, fingerprint)


def _safe_name(training_run: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", training_run).strip("-") or "run"


@dataclass(frozen=True)
class Served:
    """Where the run's target points while a checkpoint is served (None keeps the spec's own value)."""

    base_url: str | None
    model: str | None


@runtime_checkable
class ServingStrategy(Protocol):
    """Serves a checkpoint as an OpenAI-compatible endpoint while the ``with`` block runs."""

    name: str
    """A short name for results metadata (``vllm``, ``lora``, ``endpoint``, ``transformers``)."""

    def serve(self, ref: ModelRef) -> AbstractContextManager[Served]:
        """Make ``ref`` reachable; release everything started for it when the block ends.

        Args:
            ref: The checkpoint or base model.

        Returns:
            A context manager giving the base URL and model name to request.

        Raises:
            UnservableError: The strategy cannot serve what ``ref`` holds.
            ServingError: Serving failed.

        """
        ...


def api_root(base_url: str) -> str:
    """A base URL without a trailing ``/v1`` (vLLM's management routes sit beside the API's)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


class Endpoint:
    """A model that is already served: the spec's target, or ``base_url``/``model`` when given.

    With no ``model``, a base model given by name is requested under that name.

    Args:
        base_url: The served model's URL; None for the spec's target.
        model: The model name to request; None for the spec's.

    """

    name = "endpoint"

    def __init__(self, base_url: str | None = None, model: str | None = None) -> None:
        self.base_url = None if base_url is None else api_root(base_url) + "/v1"
        self.model = model

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        """Nothing to start: the endpoint is there.

        Args:
            ref: The checkpoint or base model (only a base model's name is used).

        """
        model = self.model
        if model is None and ref.files is None and not Path(ref.location).exists():
            model = ref.location
        yield Served(self.base_url, model)


class LoRA:
    """Loads each checkpoint as a LoRA adapter into a running vLLM, and unloads it after its evaluation.

    That vLLM must run with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. The base model is
    requested under the name it is served as (the ``MODEL`` given for ``--step base``, or ``base_model``).

    Args:
        base_url: The running vLLM's URL.
        base_model: The name the base model is served as.
        api_key_env: The environment variable holding vLLM's API key, if it needs one.
        timeout: Seconds a load or unload may take.

    """

    name = "lora"

    def __init__(
        self, base_url: str, *, base_model: str | None = None, api_key_env: str | None = None, timeout: float = 300.0
    ) -> None:
        self.root = api_root(base_url)
        self.base_url = self.root + "/v1"
        self.base_model = base_model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self._client: httpx.Client | None = None

    def client(self) -> httpx.Client:
        """One HTTP client for every checkpoint (making one costs a TLS context, a large part of a load)."""
        if self._client is None:
            self._client = httpx.Client(base_url=self.root, timeout=self.timeout)
        return self._client

    def close(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            self._client.close()
            self._client = None

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        """Load the adapter (or use the base model), yield its name, unload it.

        Args:
            ref: The checkpoint (an adapter) or the base model.

        """
        if ref.step is None:
            yield Served(self.base_url, self.base_model or ref.location)
            return
        if ref.files is None or ref.files.kind != "lora":
            if ref.files is None:
                raise UnservableError(
                    f"{ref.location} holds no LoRA adapter (adapter_config.json and adapter_model.safetensors)"
                )
            raise UnservableError(
                f"{ref.location} holds {_DESCRIBED[ref.files.kind]}, not a LoRA adapter; "
                f"{serving_advice(ref.files.kind)}"
            )
        name = ref.served_name
        client = self.client()
        self._load(client, name, ref.files.path)
        try:
            yield Served(self.base_url, name)
        finally:
            self._unload(client, name)

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        return {"Authorization": f"Bearer {key}"} if key else {}

    def _load(self, client: httpx.Client, name: str, path: Path) -> None:
        body = {"lora_name": name, "lora_path": str(path)}
        try:
            response = client.post("/v1/load_lora_adapter", json=body, headers=self._headers())
        except httpx.TransportError as exc:
            raise ServingError(f"cannot reach vLLM at {self.root} to load adapter {name}: {exc}") from None
        if response.status_code == 200:
            return
        message = error_message(response)
        if response.status_code == 400 and "already been loaded" in message:
            return  # the name is unique to these files: what is loaded under it is this checkpoint
        hint = ""
        if response.status_code in (404, 405) and "lora" not in message.lower():
            hint = " (start vLLM with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
        raise ServingError(
            f"vLLM at {self.root} did not load adapter {name} from {path}: HTTP {response.status_code}: {message}{hint}"
        )

    def _unload(self, client: httpx.Client, name: str) -> None:
        try:
            response = client.post("/v1/unload_lora_adapter", json={"lora_name": name}, headers=self._headers())
        except httpx.TransportError as exc:
            log.warning("could not unload adapter %s from %s: %s", name, self.root, exc)
            return
        if response.status_code != 200:
            log.warning(
                "vLLM at %s did not unload adapter %s: HTTP %s: %s",
                self.root,
                name,
                response.status_code,
                error_message(response),
            )


def error_message(response: httpx.Response) -> str:
    """The message of an OpenAI-style error body (``{"error": {"message"}}`` or ``{"message"}``), else the text."""
    try:
        payload: Any = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(payload, dict):
        inner = payload.get("error")
        if isinstance(inner, dict) and "message" in inner:
            return str(inner["message"])[:300]
        if "message" in payload:
            return str(payload["message"])[:300]
    return response.text[:300]
