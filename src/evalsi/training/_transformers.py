"""``--serve transformers``: a Hugging Face checkpoint served in-process (CPU or GPU), no vLLM needed.

The model answers behind a loopback OpenAI-compatible endpoint (``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/health``), so the run engine talks to it exactly as to any served model. Generation is one
request at a time (one model, one device). torch and transformers are imported only when a model is served.

What cannot work fails at once rather than once per request: a checkpoint saved without its tokenizer (a
transformers ``Trainer`` without ``processing_class``) is served with the tokenizer given, else the base model's,
else refused with a message saying so. A request the model cannot take (a prompt beyond its context) gets 400,
like vLLM; a model that fails on a request gets 500 with ``x-should-retry: false``, since asking the same model
the same thing again fails the same way. A client that hangs up stops its generation at the next token, and
stopping the server stops every generation and waits for its threads, so no thread is inside torch when the
interpreter exits; dropped connections are never printed as tracebacks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evalsi.training._serving import ModelRef, Served, ServingError

log = logging.getLogger(__name__)

Cancelled = Callable[[], bool]
"""Whether the request being generated no longer needs an answer (the client hung up, the server is stopping)."""

Generate = Callable[[Any, int, dict[str, Any], Cancelled], list[str]]
"""``generate(prompt or messages, n, sampling fields, cancelled) -> n texts``.

It raises :class:`RequestError` for a request the model cannot take (answered 400) and :class:`GenerationCancelled`
when ``cancelled()`` became true; anything else it raises is answered 500, not to be retried.
"""

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "spiece.model",
    "tiktoken.model",
)
"""Files that hold (or describe) a tokenizer; a checkpoint folder with none of them was saved without one."""

STOP_SECONDS = 120.0
"""How long stopping the server waits for generations to stop (each stops at its next token)."""


class RequestError(ValueError):
    """A request the served model cannot take (a prompt longer than its context, a bad field): answered 400."""


class GenerationCancelled(Exception):
    """The generation stopped before it finished because nobody needs its answer any more."""


def has_tokenizer(folder: Path) -> bool:
    """Whether a model folder holds a tokenizer (any of :data:`TOKENIZER_FILES`)."""
    return any((folder / name).is_file() for name in TOKENIZER_FILES)


class Transformers:
    """Loads the checkpoint with ``transformers`` and serves it on a loopback port while it is evaluated.

    The tokenizer is ``tokenizer`` when given, else the checkpoint's own, else (a checkpoint saved without one, as
    a transformers ``Trainer`` without ``processing_class`` saves it) the base model's; with neither, serving
    fails at once, saying which to give.

    Args:
        device: ``cpu``, ``cuda``, ``cuda:1``...
        base_model: The model (path or name) the checkpoints were trained from: the architecture a
            state-dictionary checkpoint (``step-100.pt``) loads into, and the tokenizer of checkpoints saved
            without one.
        tokenizer: The tokenizer (path or name) to serve every checkpoint with, in place of its own.
        max_tokens: New tokens per completion when a request does not say (within the model's context).

    """

    name = "transformers"

    def __init__(
        self,
        device: str = "cpu",
        *,
        base_model: str | None = None,
        tokenizer: str | None = None,
        max_tokens: int = 256,
    ) -> None:
        self.device = device
        self.base_model = base_model
        self.tokenizer = tokenizer
        self.max_tokens = max_tokens

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        """Load the model, serve it on a free loopback port, stop every generation and unload it afterwards.

        Args:
            ref: The checkpoint or base model.

        """
        generate = self._load(ref)
        server = OpenAICompatibleServer(generate, ref.served_name)
        server.start()
        try:
            yield Served(server.base_url, ref.served_name)
        finally:
            server.stop()

    def _load(self, ref: ModelRef) -> Generate:
        torch = _torch()
        kind = ref.files.kind if ref.files is not None else "weights"
        if kind == "lora":
            raise ServingError(f"{ref.location} is a LoRA adapter; serve it with --serve lora")
        if kind == "state-dict":
            if self.base_model is None:
                raise ServingError(
                    f"{ref.location} is a state dictionary: give the base model it fits "
                    "(Transformers(base_model=...)), or serve it with StateDict(model_factory)"
                )
            tokenizer = load_tokenizer(self.tokenizer or self.base_model)
            model = load_model(self.base_model)
            try:
                model.load_state_dict(load_state_dict(_state_path(ref)))
            except RuntimeError as exc:  # torch names the missing and unexpected keys
                raise ServingError(f"{ref.location} does not fit {self.base_model}: {exc}") from None
        else:
            location = str(ref.files.path) if ref.files is not None else ref.location
            tokenizer = load_tokenizer(self._tokenizer_source(ref, location))
            model = load_model(location)
        return self._generator(model, tokenizer, torch)

    def _tokenizer_source(self, ref: ModelRef, location: str) -> str:
        """Where the tokenizer comes from: the one given, the checkpoint's own, else the base model's."""
        if self.tokenizer is not None:
            return self.tokenizer
        folder = Path(location)
        if not folder.is_dir() or has_tokenizer(folder):
            return location
        if self.base_model is not None:
            log.warning("%s holds no tokenizer; serving it with the base model's (%s)", ref.location, self.base_model)
            return self.base_model
        raise ServingError(
            f"{ref.location} holds no tokenizer (none of {', '.join(TOKENIZER_FILES[:3])}...): a transformers "
            "Trainer saves it with a checkpoint only when given processing_class=tokenizer. Give the tokenizer to "
            "serve it with: --tokenizer PATH_OR_NAME or --base-model PATH_OR_NAME (the model it was trained from), "
            "or Transformers(tokenizer=...)"
        )

    def _generator(self, model: Any, tokenizer: Any, torch: Any) -> Generate:
        """Generation with ``model`` and ``tokenizer`` on this strategy's device, one request at a time."""
        from transformers import StoppingCriteria, StoppingCriteriaList

        model.to(self.device).eval()
        lock = threading.Lock()
        context = _context_length(model)

        class _StopWhenCancelled(StoppingCriteria):  # type: ignore[misc]  # transformers is untyped here
            def __init__(self, cancelled: Cancelled) -> None:
                self.cancelled = cancelled

            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), self.cancelled(), dtype=torch.bool, device=input_ids.device)

        def generate(prompt: Any, n: int, sampling: dict[str, Any], cancelled: Cancelled) -> list[str]:
            if isinstance(prompt, list):
                if getattr(tokenizer, "chat_template", None):
                    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
                else:
                    text = "\n".join(str(m.get("content", "")) for m in prompt)
            else:
                text = str(prompt)
            inputs = tokenizer(text, return_tensors="pt").to(self.device)
            length = int(inputs["input_ids"].shape[1])
            if length == 0:
                raise RequestError("the prompt is empty once tokenized")
            temperature = float(sampling.get("temperature") or 0.0)
            sample = temperature > 0
            # Greedy decoding gives one answer however often it is asked: generate it once, repeat it n times.
            options: dict[str, Any] = {
                "max_new_tokens": _new_tokens(sampling.get("max_tokens"), self.max_tokens, length, context),
                "num_return_sequences": n if sample else 1,
                "do_sample": sample,
                "stopping_criteria": StoppingCriteriaList([_StopWhenCancelled(cancelled)]),
            }
            if temperature > 0:
                options["temperature"] = temperature
                options["top_p"] = float(sampling.get("top_p") or 1.0)
            if tokenizer.pad_token_id is None:
                options["pad_token_id"] = tokenizer.eos_token_id
            with lock:
                if cancelled():  # waited for the lock while its client left, or the server stopped
                    raise GenerationCancelled
                with torch.no_grad():
                    output = model.generate(**inputs, **options)
            if cancelled():
                raise GenerationCancelled
            texts = [tokenizer.decode(row[length:], skip_special_tokens=True) for row in output]
            return texts if sample else texts * n

        return generate


def _context_length(model: Any) -> int | None:
    """How many positions the model holds (prompt and completion together), when its config says."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _new_tokens(requested: Any, default: int, prompt: int, context: int | None) -> int:
    """New tokens to generate: as asked (refused beyond the context, as vLLM does), else the default within it.

    Example:
        >>> _new_tokens(None, 256, 10, 64), _new_tokens(5, 256, 10, 64), _new_tokens(None, 16, 10, None)
        (54, 5, 16)

    """
    room = None if context is None else context - prompt
    if room is not None and room <= 0:
        raise RequestError(f"the prompt is {prompt} tokens; the model's context is {context} tokens")
    if requested is None:
        return default if room is None else min(default, room)
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {requested!r}")
    if room is not None and requested > room:
        raise RequestError(
            f"this model's context is {context} tokens; the prompt takes {prompt} and max_tokens asks for "
            f"{requested} more (at most {room})"
        )
    return requested


def load_model(location: str) -> Any:
    """A causal LM from a checkpoint folder or a model name, or a :class:`ServingError` saying why not."""
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(location)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:  # missing files, unknown architecture, bad weights
        raise ServingError(f"cannot load the model at {location}: {exc}") from None


def load_tokenizer(location: str) -> Any:
    """A tokenizer from a folder or a model name that encodes text to tokens, or a :class:`ServingError`.

    transformers builds an empty tokenizer from a folder holding only a model config; it is refused here, where
    it would otherwise fail every request deep inside the model.
    """
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(location)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ServingError(f"cannot load a tokenizer from {location}: {exc}") from None
    if not tokenizer("Hello, world.")["input_ids"]:
        raise ServingError(
            f"the tokenizer loaded from {location} turns text into no tokens (it has no vocabulary); "
            "give one that holds a tokenizer (--tokenizer PATH_OR_NAME, Transformers(tokenizer=...))"
        )
    return tokenizer


def _torch() -> Any:
    try:
        import torch
        import transformers  # noqa: F401  (needed to serve, checked before any work)
    except ImportError as exc:
        raise ServingError(f"serving in-process needs torch and transformers installed ({exc})") from None
    return torch


def _state_path(ref: ModelRef) -> Path:
    return ref.files.path if ref.files is not None else Path(ref.location)


def load_state_dict(path: Path, strip_prefix: str = "") -> dict[str, Any]:
    """The weights in a state-dictionary file, with ``strip_prefix`` taken off every key.

    The file may be the weights themselves, ``{"model": ..., "optimizer": ...}`` as training loops save it, or
    Lightning's ``.ckpt`` (``{"state_dict": ...}``, keys prefixed with the LightningModule's attribute name).
    """
    import torch

    state = torch.load(str(path), map_location="cpu", weights_only=True)
    for key in ("model", "state_dict"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
            break
    if not isinstance(state, dict):
        raise ServingError(f"{path} holds no state dictionary (found {type(state).__name__})")
    if strip_prefix:
        state = {k.removeprefix(strip_prefix): v for k, v in state.items()}
    return state


class StateDict(Transformers):
    """Serves a state-dictionary checkpoint (``.pt``, ``.ckpt``) by loading it into a model your factory builds.

    A state dictionary is weights without an architecture, so it is not a vLLM model: ``model_factory()`` returns
    ``(model, tokenizer)`` (a transformers causal LM and its tokenizer, built fresh), the checkpoint's weights are
    loaded into the model, and it is served in-process behind the same loopback endpoint as :class:`Transformers`.

    Example::

        serving = StateDict(lambda: (MyLlama(config), tokenizer), strip_prefix="model.")
        evaluator = CheckpointEvaluator("forgetting.yaml", training_run="run-1", serving=serving)

    Args:
        model_factory: Builds ``(model, tokenizer)``; called once per checkpoint.
        strip_prefix: Taken off every weight's name (a LightningModule that holds the model as ``self.model``).
        device: ``cpu``, ``cuda``...
        max_tokens: New tokens per completion when a request does not say.

    """

    name = "state-dict"

    def __init__(
        self,
        model_factory: Callable[[], tuple[Any, Any]],
        *,
        strip_prefix: str = "",
        device: str = "cpu",
        max_tokens: int = 256,
    ) -> None:
        super().__init__(device, max_tokens=max_tokens)
        self.model_factory = model_factory
        self.strip_prefix = strip_prefix

    def _load(self, ref: ModelRef) -> Generate:
        torch = _torch()
        kind = ref.files.kind if ref.files is not None else "state-dict"
        if kind != "state-dict":
            raise ServingError(f"{ref.location} is not a state dictionary ({kind}); serve it with Transformers()")
        model, tokenizer = self.model_factory()
        try:
            model.load_state_dict(load_state_dict(_state_path(ref), self.strip_prefix))
        except RuntimeError as exc:  # torch names the missing and unexpected keys
            raise ServingError(f"{ref.location} does not fit the model model_factory built: {exc}") from None
        return self._generator(model, tokenizer, torch)


class OpenAICompatibleServer:
    """A loopback HTTP server answering OpenAI's completion routes from a ``generate`` function.

    ``stop()`` cancels every generation (each stops at its next token), closes every connection and waits for the
    request threads, so nothing it started is still inside the model afterwards.

    Args:
        generate: The function answering each request.
        model: The model name it answers to.
        host: The loopback address to listen on (the port is a free one).

    """

    def __init__(self, generate: Generate, model: str, host: str = "127.0.0.1") -> None:
        self.generate = generate
        self.model = model
        self.stopping = threading.Event()
        """Set by :meth:`stop`: generations in progress stop at their next token."""
        handler = type("Handler", (_Handler,), {"owner": self})
        self._server = _QuietServer((host, 0), handler)
        self._thread: threading.Thread | None = None
        self._open: dict[socket.socket, threading.Thread] = {}
        self._lock = threading.Lock()

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def start(self) -> None:
        """Serve on a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="evalsi-transformers-server",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Stop serving: cancel generations, close connections and the port, wait for the request threads.

        Args:
            timeout: Seconds to wait for the request threads.

        """
        self.stopping.set()
        self._server.shutdown()
        with self._lock:
            connections = dict(self._open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)  # a thread waiting for the next request wakes up
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)
        deadline = time.monotonic() + timeout
        for thread in connections.values():
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in connections.values()):
            log.warning("a request to the in-process model did not stop within %.0f s", timeout)

    def _opened(self, connection: socket.socket) -> None:
        with self._lock:
            self._open[connection] = threading.current_thread()

    def _closed(self, connection: socket.socket) -> None:
        with self._lock:
            self._open.pop(connection, None)


class _QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that treats a client going away as normal, not as a traceback on stderr."""

    daemon_threads = True
    block_on_close = False  # OpenAICompatibleServer.stop waits for its threads, within a bound

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A dropped connection is the client's business (it timed out or stopped); anything else is logged."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError | TimeoutError):
            log.debug("client %s went away: %s", client_address, error)
            return
        log.error("the in-process model server failed on a request from %s", client_address, exc_info=error)


def _hung_up(connection: socket.socket) -> bool:
    """Whether the client closed its end (a peek that would block means it is still there)."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: OpenAICompatibleServer

    def setup(self) -> None:
        """Send each reply at once (no Nagle delay between the headers and the body); count the connection open."""
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner._opened(self.request)

    def finish(self) -> None:
        """Flush what is left (a client that left is no error) and count the connection closed."""
        try:
            with contextlib.suppress(ConnectionError, TimeoutError):
                super().finish()
        finally:
            self.owner._closed(self.request)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests are not logged."""

    def do_GET(self) -> None:
        """``/health`` and ``/v1/models``."""
        if self.path == "/health":
            self._json(200, {})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.owner.model, "object": "model"}]})
        else:
            self._json(404, {"error": {"message": f"no route GET {self.path}", "code": 404}})

    def do_POST(self) -> None:
        """``/v1/chat/completions`` and ``/v1/completions``."""
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._error(400, "body is not JSON")
            return
        chat = self.path.endswith("/chat/completions")
        if not chat and not self.path.endswith("/completions"):
            self._error(404, f"no route POST {self.path}")
            return
        if not isinstance(body, dict):
            self._error(400, "body must be a JSON object")
            return
        prompt = body.get("messages") if chat else body.get("prompt")
        n = body.get("n", 1)
        if prompt is None or (chat and not isinstance(prompt, list)):
            self._error(400, "messages must be a list of chat messages" if chat else "prompt is required")
            return
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            self._error(400, f"n must be a positive integer, got {n!r}")
            return
        owner, connection = self.owner, self.request
        try:
            texts = owner.generate(prompt, n, body, lambda: owner.stopping.is_set() or _hung_up(connection))
        except RequestError as exc:  # the model cannot take this request: the client's to change, as in vLLM
            self._error(400, str(exc))
            return
        except GenerationCancelled:
            self._error(503, "the server is stopping" if owner.stopping.is_set() else "the client went away")
            return
        except Exception as exc:  # the model failed on this request: an HTTP error, not a dead server
            # The same model fails the same request the same way: tell clients not to ask again.
            self._error(500, f"{type(exc).__name__}: {exc}", retry=False)
            return
        if chat:
            choices: list[dict[str, Any]] = [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": "stop"}
                for i, t in enumerate(texts)
            ]
        else:
            choices = [{"index": i, "text": t, "finish_reason": "stop"} for i, t in enumerate(texts)]
        self._json(
            200,
            {
                "id": f"cmpl-{time.monotonic_ns()}",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.owner.model,
                "choices": choices,
            },
        )

    def _error(self, status: int, message: str, *, retry: bool | None = None) -> None:
        """An OpenAI-style error; ``retry`` False adds ``x-should-retry: false``."""
        headers = {} if retry is None else {"x-should-retry": "true" if retry else "false"}
        self._json(status, {"error": {"message": message, "code": status}}, headers)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (ConnectionError, TimeoutError):  # the client left before its answer: nothing to tell it
            self.close_connection = True
