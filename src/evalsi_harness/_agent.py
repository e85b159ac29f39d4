"""An agent loop: a policy answers the chat so far with tool calls, and the loop steps the environment with them.

The loop goes on until the episode ends; a policy without tool calling may answer with an action as text.

A policy is any callable ``policy(messages, tools) -> assistant message`` in the OpenAI chat format:
:class:`ScriptedPolicy` replays fixed actions, :class:`OpenAIPolicy` asks any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from evalsi._util.retry import RetryPolicy
from evalsi._util.retry_transports import RetryTransport
from evalsi.specs import SamplingSpec
from evalsi_harness._actions import Action, parse_action
from evalsi_harness.gym import TaskEnv

Message = dict[str, Any]

SYSTEM_PROMPT = (
    "You are working on a task in a sandboxed Linux work dir. Use the tools bash, read_file and write_file, "
    "then call submit once the task is done; the work dir is graded as it is then. Without tool calling, answer "
    'with exactly one action as a JSON object, e.g. {"tool": "bash", "command": "ls"} or {"tool": "submit"}.'
)


class Policy(Protocol):
    """Chooses the next assistant message (with ``tool_calls``, or an action as ``content``)."""

    def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message: ...


@dataclass
class Episode:
    """How an episode went: the reward (None when the checker could not run) and the whole chat."""

    reward: float | None
    steps: int
    terminated: bool
    truncated: bool
    messages: list[Message]
    info: dict[str, Any] = field(default_factory=dict)
    """The last step's info (``checker`` holds the verdict and its reason)."""


def run_episode(env: TaskEnv, policy: Policy, *, system: str = SYSTEM_PROMPT, seed: int | None = None) -> Episode:
    """Reset ``env`` and let ``policy`` act until the episode ends (submit, steps or limits run out).

    Args:
        env: The environment.
        policy: What picks each action from the chat so far.
        system: The system message the chat starts with.
        seed: Passed to ``env.reset``.

    """
    observation, info = env.reset(seed=seed)
    messages: list[Message] = [{"role": "system", "content": system}, {"role": "user", "content": observation}]
    steps = 0
    while True:
        reply = policy(messages, env.tools)
        messages.append(reply)
        calls = reply.get("tool_calls") or []
        todo: list[tuple[str | None, object]] = [(call.get("id"), call) for call in calls]
        if not todo:
            todo = [(None, reply.get("content") or "")]
        for call_id, action in todo:
            observation, reward, terminated, truncated, info = env.step(action)
            steps += 1
            if call_id is None:
                messages.append({"role": "user", "content": observation})
            else:
                messages.append({"role": "tool", "tool_call_id": call_id, "content": observation})
            if terminated or truncated:
                return Episode(reward, steps, terminated, truncated, messages, info)


class ScriptedPolicy:
    """Plays fixed actions in order (each a tool call; a string is sent as raw text), then submits.

    Args:
        actions: The actions: tool calls (mappings or :class:`Action`) or raw texts.

    """

    def __init__(self, actions: Sequence[object]) -> None:
        self.actions = list(actions)
        self._next = 0

    def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        """The next scripted action as an assistant message."""
        index = self._next
        self._next += 1
        item: object = self.actions[index] if index < len(self.actions) else {"tool": "submit"}
        if isinstance(item, str):
            return {"role": "assistant", "content": item}
        action: Action = parse_action(item)
        call = {"name": action.tool, "arguments": json.dumps(dict(action.args))}
        tool_call = {"id": f"call_{index}", "type": "function", "function": call}
        return {"role": "assistant", "content": None, "tool_calls": [tool_call]}


class OpenAIPolicy:
    """Asks an OpenAI-compatible chat completions endpoint for the next message (with the tools, by default).

    Every request carries the sampling settings given (``temperature``, ``top_p``, ``max_tokens``, ``seed``,
    ``stop``, and ``extra_body``'s fields as they are), and goes through evalsi's shared retry transport: 408,
    409, 425, 429, 500, 502, 503, 504, timeouts and dropped connections are tried again, ``max_retries`` times,
    after ``retry_backoff`` seconds doubling each time (a ``Retry-After`` header wins; no wait exceeds 30 s).

    Args:
        base_url: The endpoint's base URL, such as ``http://localhost:8000/v1``.
        model: The ``model`` sent with each request.
        api_key: Sent as ``Authorization: Bearer``; none sends no key.
        use_tools: Offer the actions as OpenAI tools (else the model answers with an action as text).
        temperature: Sampling temperature (left to the server when None, as every setting below).
        top_p: Nucleus sampling mass.
        max_tokens: The most tokens one reply may take.
        seed: The sampling seed.
        stop: Stop sequences.
        extra_body: Further request fields sent as they are (``top_k``, ``chat_template_kwargs``...).
        headers: Further HTTP headers sent with every request.
        timeout: Seconds one request may take before it is retried.
        max_retries: Further attempts after a retryable failure.
        retry_backoff: Seconds before the first retry.

    Raises:
        pydantic.ValidationError: A sampling setting is out of range (a negative temperature, ``max_tokens`` 0...).
        httpx.HTTPError: From a call: the endpoint failed (after the retries) or answered without a message.

    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        use_tools: bool = True,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        max_retries: int = 5,
        retry_backoff: float = 1.0,
    ) -> None:
        sampling = SamplingSpec(
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            stop=list(stop) if stop is not None else None,
            extra=dict(extra_body or {}),
        )
        self.model = model
        self.use_tools = use_tools
        self.fields = sampling.request_fields()
        """The sampling fields merged into every request body."""
        all_headers = dict(headers or {})
        if api_key:
            all_headers["Authorization"] = f"Bearer {api_key}"
        self._transport = RetryTransport(RetryPolicy(max_retries, retry_backoff))
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/", headers=all_headers, timeout=timeout, transport=self._transport
        )

    @property
    def attempts(self) -> int:
        """HTTP requests sent so far, retries included."""
        return self._transport.attempts

    def __call__(self, messages: list[Message], tools: list[dict[str, Any]]) -> Message:
        """One chat completion; its first choice's message."""
        body: dict[str, Any] = {**self.fields, "model": self.model, "messages": messages}
        if self.use_tools:
            body["tools"] = tools
        response = self._client.post("chat/completions", json=body)
        response.raise_for_status()
        try:
            message = dict(response.json()["choices"][0]["message"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise httpx.DecodingError(f"the endpoint answered without a message: {exc}") from None
        message["role"] = "assistant"
        return message

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()
