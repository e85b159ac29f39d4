"""A stand-in for ``vllm serve`` (vLLM cannot run without a GPU here): its command line and its HTTP API.

Run as ``python vllm_standin.py serve MODEL --host H --port P [--served-model-name NAME] [--enable-lora] ...``
(standard library only, so it runs as a plain file). Like vLLM it parses its options strictly (an unknown
option exits 2), fails to start on a directory without ``config.json``, only listens once the "engine" is up
(``VLLM_STANDIN_STARTUP`` seconds), and answers on real HTTP/1.1:

- ``GET /health``: 200, empty body.
- ``GET /v1/models``: ``{"object": "list", "data": [{"id", "object": "model", "root", "parent", ...}]}``, the
  served model and every loaded adapter (``parent`` = the served model, ``root`` = the adapter's path).
- ``POST /v1/chat/completions`` and ``/v1/completions``: OpenAI format with ``n`` choices and ``usage``; an
  unknown ``model`` gets 404 ``The model `x` does not exist.``.
- ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` and ``/v1/unload_lora_adapter``
  ``{"lora_name"}``, only with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (else 404 ``{"detail": "Not Found"}``):
  200 with a plain-text ``Success: LoRA adapter '<name>' added successfully.``, else a JSON ``ErrorResponse``
  ``{"error": {"message", "type", "param", "code"}}`` (400 already loaded / no adapter at the path, 404 unknown
  name on unload).

What a model answers comes from ``answers.json`` in its directory (the adapter's for an adapter): a mapping of
prompt to answer, with ``"*"`` for any other prompt. So a test plants a regression by writing a checkpoint
whose answers are wrong. ``VLLM_STANDIN_LOG`` names a file that gets one JSON line per event (start, stop,
every request with its body). ``VLLM_STANDIN_DELAY`` adds seconds to every completion.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import stat
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def standin_executable(folder: Path, python: str = sys.executable) -> Path:
    """Write a ``vllm`` executable into ``folder`` that runs this stand-in; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "vllm"
    path.write_text(f'#!/bin/sh\nexec "{python}" "{HERE}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def read_log(path: Path) -> list[dict[str, Any]]:
    """The events a stand-in wrote to its ``VLLM_STANDIN_LOG`` file."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def load_answers(folder: Path) -> dict[str, str]:
    """A model directory's ``answers.json`` (empty when it has none)."""
    try:
        data = json.loads((folder / "answers.json").read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


class State:
    """The served model, loaded adapters and the event log, shared by the request threads."""

    def __init__(self, model: str, served: list[str], enable_lora: bool, api_key: str | None) -> None:
        self.model = model
        self.served = served
        self.enable_lora = enable_lora
        self.api_key = api_key
        self.answers = load_answers(Path(model)) if Path(model).is_dir() else {}
        self.adapters: dict[str, tuple[str, dict[str, str]]] = {}
        self.lock = threading.Lock()
        self.log_path = os.environ.get("VLLM_STANDIN_LOG")
        self.delay = float(os.environ.get("VLLM_STANDIN_DELAY", "0") or 0)
        self.runtime_lora = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("true", "1")

    def log(self, event: str, **fields: Any) -> None:
        if not self.log_path:
            return
        line = json.dumps({"event": event, "pid": os.getpid(), "time": time.time(), **fields})
        with self.lock, open(self.log_path, "a") as handle:
            handle.write(line + "\n")


def error(message: str, kind: str, code: int, param: str | None = None) -> tuple[int, Any]:
    """vLLM's ErrorResponse body."""
    return code, {"error": {"message": message, "type": kind, "param": param, "code": code}}


class Handler(BaseHTTPRequestHandler):
    """Routes vLLM's OpenAI-compatible and LoRA management endpoints."""

    protocol_version = "HTTP/1.1"
    state: State

    def setup(self) -> None:
        """Send each reply at once (no Nagle delay between the headers and the body)."""
        super().setup()
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.state.log("request", method="GET", path=self.path)
        if self.path == "/health":
            self._send(200, b"", "application/json")
        elif self.path == "/v1/models":
            self._json(200, self._models())
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(*error("body is not valid JSON", "BadRequestError", 400))
            return
        self.state.log("request", method="POST", path=self.path, body=body)
        if self.state.api_key and self.headers.get("Authorization") != f"Bearer {self.state.api_key}":
            self._json(401, {"error": "Unauthorized"})
            return
        if self.path in ("/v1/chat/completions", "/v1/completions"):
            self._json(*self._complete(body, chat=self.path.endswith("chat/completions")))
        elif self.path in ("/v1/load_lora_adapter", "/v1/unload_lora_adapter") and self.state.runtime_lora:
            status, payload = self._load(body) if "/load" in self.path else self._unload(body)
            if isinstance(payload, str):
                self._send(status, payload.encode(), "text/plain; charset=utf-8")
            else:
                self._json(status, payload)
        else:
            self._json(404, {"detail": "Not Found"})

    def _models(self) -> dict[str, Any]:
        created = int(time.time())
        data = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": self.state.model,
                "parent": None,
                "max_model_len": 4096,
            }
            for name in self.state.served
        ]
        with self.state.lock:
            adapters = dict(self.state.adapters)
        data += [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": path,
                "parent": self.state.served[0],
                "max_model_len": 4096,
            }
            for name, (path, _) in adapters.items()
        ]
        return {"object": "list", "data": data}

    def _complete(self, body: dict[str, Any], *, chat: bool) -> tuple[int, Any]:
        model = str(body.get("model") or self.state.served[0])
        with self.state.lock:
            adapter = self.state.adapters.get(model)
        if adapter is not None:
            answers = adapter[1]
        elif model in self.state.served:
            answers = self.state.answers
        else:
            return error(f"The model `{model}` does not exist.", "NotFoundError", 404, "model")
        if self.state.delay:
            time.sleep(self.state.delay)
        if chat:
            users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
            prompt = str(users[-1].get("content", "")) if users else ""
        else:
            prompt = str(body.get("prompt", ""))
        text = answers.get(prompt, answers.get("*", ""))
        n = int(body.get("n") or 1)
        if chat:
            choices: list[dict[str, Any]] = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
                for i in range(n)
            ]
        else:
            choices = [{"index": i, "text": text, "finish_reason": "stop", "logprobs": None} for i in range(n)]
        tokens = n * max(1, len(text.split()))
        return 200, {
            "id": f"cmpl-{time.monotonic_ns()}",
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": model,
            "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1},
        }

    def _load(self, body: dict[str, Any]) -> tuple[int, Any]:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return error("Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400)
        if not self.state.enable_lora:
            return error("LoRA is not enabled; start the server with --enable-lora.", "BadRequestError", 400)
        with self.state.lock:
            if name in self.state.adapters:
                return error(f"The lora adapter '{name}' has already been loaded.", "InvalidUserInput", 400)
        folder = Path(path)
        if not (folder / "adapter_config.json").is_file():
            return error(f"Loading lora {name} failed: No adapter found for {path}", "BadRequestError", 400)
        with self.state.lock:
            self.state.adapters[name] = (str(folder), load_answers(folder))
        return 200, f"Success: LoRA adapter '{name}' added successfully."

    def _unload(self, body: dict[str, Any]) -> tuple[int, Any]:
        name = body.get("lora_name")
        with self.state.lock:
            if name not in self.state.adapters:
                return error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
            del self.state.adapters[name]
        return 200, f"Success: LoRA adapter '{name}' removed successfully."

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class Server(ThreadingHTTPServer):
    """Threaded HTTP server that takes a client hanging up mid-request quietly (as uvicorn does)."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+", default=None)
    serve.add_argument("--api-key", default=None)
    serve.add_argument("--enable-lora", action="store_true")
    serve.add_argument("--max-loras", type=int, default=1)
    serve.add_argument("--max-lora-rank", type=int, default=16, choices=[1, 8, 16, 32, 64, 128, 256, 320, 512])
    serve.add_argument("--max-cpu-loras", type=int, default=None)
    serve.add_argument("--max-model-len", type=int, default=None)
    serve.add_argument("--tokenizer", default=None)
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    model = args.model
    if Path(model).exists() and not (Path(model) / "config.json").is_file():
        print(f"OSError: {model} does not appear to have a file named config.json.", file=sys.stderr)
        return 1
    state = State(model, args.served_model_name or [model], args.enable_lora, args.api_key)
    state.log("start", argv=sys.argv[1:])
    time.sleep(float(os.environ.get("VLLM_STANDIN_STARTUP", "0") or 0))  # "loading the engine"
    handler = type("BoundHandler", (Handler,), {"state": state})
    server = Server((args.host or "0.0.0.0", args.port), handler)

    def stop(signum: int, frame: Any) -> None:
        state.log("stop", signal=signum)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"INFO:     Uvicorn running on http://{args.host}:{args.port}", flush=True)
    server.serve_forever(poll_interval=0.05)
    server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
