"""``--serve transformers``: a Hugging Face checkpoint served in-process (CPU or GPU), no vLLM needed.

The model answers behind a loopback OpenAI-compatible endpoint (``/v1/chat/completions``, ``/v1/completions``,
``/v1/models``, ``/health``), so the run engine talks to it exactly as to any served model. Generation is one
request at a time (one model, one device). torch and transformers are imported only when a model is served.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from evalsi.training._serving import ModelRef, Served, ServingError

Generate = Callable[[Any, int, dict[str, Any]], list[str]]
"""``generate(prompt or messages, n, sampling fields) -> n texts``."""


class Transformers:
    """Loads the checkpoint with ``transformers`` and serves it on a loopback port while it is evaluated.

    Args:
        device: ``cpu``, ``cuda``, ``cuda:1``...
        base_model: For a state-dictionary checkpoint (``step-100.pt``): the model (path or name) whose
            architecture and tokenizer the state dictionary fits.
        max_tokens: New tokens per completion when a request does not say.

    """

    name = "transformers"

    def __init__(self, device: str = "cpu", *, base_model: str | None = None, max_tokens: int = 256) -> None:
        self.device = device
        self.base_model = base_model
        self.max_tokens = max_tokens

    @contextlib.contextmanager
    def serve(self, ref: ModelRef) -> Iterator[Served]:
        """Load the model, serve it on a free loopback port, unload it afterwards."""
        generate = self._load(ref)
        server = OpenAICompatibleServer(generate, ref.served_name)
        server.start()
        try:
            yield Served(server.base_url, ref.served_name)
        finally:
            server.stop()

    def _load(self, ref: ModelRef) -> Generate:
        torch = _torch()
        from transformers import AutoModelForCausalLM, AutoTokenizer

        kind = ref.files.kind if ref.files is not None else "weights"
        if kind == "lora":
            raise ServingError(f"{ref.location} is a LoRA adapter; serve it with --serve lora")
        if kind == "state-dict":
            if self.base_model is None:
                raise ServingError(
                    f"{ref.location} is a state dictionary: give the base model it fits "
                    "(Transformers(base_model=...)), or serve it with StateDict(model_factory)"
                )
            model = AutoModelForCausalLM.from_pretrained(self.base_model)
            model.load_state_dict(load_state_dict(_state_path(ref)))
            tokenizer = AutoTokenizer.from_pretrained(self.base_model)
        else:
            location = str(ref.files.path) if ref.files is not None else ref.location
            model = AutoModelForCausalLM.from_pretrained(location)
            tokenizer = AutoTokenizer.from_pretrained(location)
        return self._generator(model, tokenizer, torch)

    def _generator(self, model: Any, tokenizer: Any, torch: Any) -> Generate:
        """Generation with ``model`` and ``tokenizer`` on this strategy's device, one request at a time."""
        model.to(self.device).eval()
        lock = threading.Lock()

        def generate(prompt: Any, n: int, sampling: dict[str, Any]) -> list[str]:
            if isinstance(prompt, list):
                if getattr(tokenizer, "chat_template", None):
                    text = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
                else:
                    text = "\n".join(str(m.get("content", "")) for m in prompt)
            else:
                text = str(prompt)
            inputs = tokenizer(text, return_tensors="pt").to(self.device)
            temperature = float(sampling.get("temperature") or 0.0)
            sample = temperature > 0
            # Greedy decoding gives one answer however often it is asked: generate it once, repeat it n times.
            options: dict[str, Any] = {
                "max_new_tokens": int(sampling.get("max_tokens") or self.max_tokens),
                "num_return_sequences": n if sample else 1,
                "do_sample": sample,
            }
            if temperature > 0:
                options["temperature"] = temperature
                options["top_p"] = float(sampling.get("top_p") or 1.0)
            if tokenizer.pad_token_id is None:
                options["pad_token_id"] = tokenizer.eos_token_id
            with lock, torch.no_grad():
                output = model.generate(**inputs, **options)
            start = inputs["input_ids"].shape[1]
            texts = [tokenizer.decode(row[start:], skip_special_tokens=True) for row in output]
            return texts if sample else texts * n

        return generate


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
    """A loopback HTTP server answering OpenAI's completion routes from a ``generate`` function."""

    def __init__(self, generate: Generate, model: str, host: str = "127.0.0.1") -> None:
        self.generate = generate
        self.model = model
        handler = type("Handler", (_Handler,), {"owner": self})
        self._server = ThreadingHTTPServer((host, 0), handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

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

    def stop(self) -> None:
        """Stop serving and close the port."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: OpenAICompatibleServer

    def setup(self) -> None:
        """Send each reply at once (no Nagle delay between the headers and the body)."""
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

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
            self._json(400, {"error": {"message": "body is not JSON", "code": 400}})
            return
        chat = self.path.endswith("/chat/completions")
        if not chat and not self.path.endswith("/completions"):
            self._json(404, {"error": {"message": f"no route POST {self.path}", "code": 404}})
            return
        prompt = body.get("messages") if chat else body.get("prompt")
        n = int(body.get("n") or 1)
        try:
            texts = self.owner.generate(prompt, n, body)
        except Exception as exc:  # the model failed on this request: an HTTP error, not a dead server
            self._json(500, {"error": {"message": f"{type(exc).__name__}: {exc}", "code": 500}})
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

    def _json(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
