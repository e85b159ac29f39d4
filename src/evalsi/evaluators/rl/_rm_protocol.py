r"""What ``reward-model`` sends and expects: rendering, request bodies and replies of its two wire protocols.

Rendering (what the reward model reads) follows one rule for both protocols:

- when the prompt and the completion are both text, the text is ``prompt + completion``, unchanged (OpenRLHF's
  ``query`` is exactly that: the decoded prompt followed by the response);
- when either is a list of chat messages, the conversation is the prompt's messages (a text prompt becomes one
  ``user`` message) followed by the completion's (a text completion becomes one ``assistant`` message). For
  vLLM ``/pooling`` it is sent as ``messages`` so the server applies the model's own chat template; as text it is
  rendered in ChatML, ``<|im_start|>{role}\n{content}<|im_end|>\n`` per message, with the prompt's messages
  first, so the query still starts with the rendered prompt.

OpenRLHF (``POST <url>``): ``{"query": [prompt + completion], "prompts": [prompt], "labels": [reference or ""]}``
→ ``{"rewards": [float], "scores": [...], "extra_logs": {...}}``; ``rewards`` is the raw score.

vLLM (``POST <url>``, normally ``http://host:8000/pooling``): ``{"model", "input": [text, ...]}`` (batched) or
``{"model", "messages": [...]}`` (one conversation per call) → ``{"data": [{"index": i, "data": [float]}]}``.
A token-level output (a list per token) is read at its last token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from evalsi.records import Record, content_text

Protocol = Literal["openrlhf", "vllm-pooling"]
Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class RMInput:
    """One rollout as the reward model sees it. ``messages`` set means "send alone, as a conversation"."""

    query: str
    prompt: str
    label: str
    messages: tuple[Message, ...] | None = None


class ReplyError(Exception):
    """The server answered 200 but outside the protocol; every rollout of the call errors with this reason."""


def rm_input(record: Record, protocol: Protocol, chat_as_messages: bool) -> RMInput:
    """Render one record for the reward model (see the module docstring for the rule)."""
    label = _label(record.reference)
    if isinstance(record.prompt, list) or isinstance(record.completion, list):
        conversation = _conversation(record)
        prompt_messages = _as_messages(record.prompt, "user")
        prompt = chatml(prompt_messages)
        query = chatml(conversation)
        send_messages = protocol == "vllm-pooling" and chat_as_messages
        return RMInput(query, prompt, label, tuple(conversation) if send_messages else None)
    prompt = record.prompt or ""
    completion = record.completion if isinstance(record.completion, str) else ""
    return RMInput(prompt + completion, prompt, label)


def chatml(messages: Sequence[Mapping[str, Any]]) -> str:
    """Render chat messages as ChatML text."""
    return "".join(f"<|im_start|>{m.get('role', 'user')}\n{content_text([dict(m)])}<|im_end|>\n" for m in messages)


def _conversation(record: Record) -> list[Message]:
    return _as_messages(record.prompt, "user") + _as_messages(record.completion, "assistant")


def _as_messages(content: str | list[Message] | None, role: str) -> list[Message]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    return [dict(m) for m in content]


def _label(reference: Any) -> str:
    if reference is None:
        return ""
    if isinstance(reference, str):
        return reference
    return orjson.dumps(reference, default=str).decode()


def request_body(
    protocol: Protocol, inputs: Sequence[RMInput], model: str | None, extra: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON body of one call carrying ``inputs`` (a conversation input is always alone)."""
    if protocol == "openrlhf":
        body: dict[str, Any] = {
            "query": [i.query for i in inputs],
            "prompts": [i.prompt for i in inputs],
            "labels": [i.label for i in inputs],
        }
    else:
        body = {} if model is None else {"model": model}
        if len(inputs) == 1 and inputs[0].messages is not None:
            body["messages"] = list(inputs[0].messages)
        else:
            body["input"] = [i.query for i in inputs]
    body.update(extra)
    return body


def parse_reply(protocol: Protocol, reply: Any, count: int, label_index: int | None) -> list[float | str]:
    """Per-input raw scores from a reply, or a reason string where one input has no usable score.

    Raises:
        ReplyError: The reply as a whole does not follow the protocol.

    """
    if not isinstance(reply, Mapping):
        raise ReplyError(f"expected a JSON object, got {type(reply).__name__}")
    if protocol == "openrlhf":
        return _openrlhf_scores(reply, count)
    return _pooling_scores(reply, count, label_index)


def _openrlhf_scores(reply: Mapping[str, Any], count: int) -> list[float | str]:
    rewards = reply.get("rewards")
    if not isinstance(rewards, list):
        raise ReplyError(f"expected 'rewards': a list of numbers, got {_kind(rewards)}")
    if len(rewards) != count:
        raise ReplyError(f"sent {count} queries, got {len(rewards)} rewards")
    return [_number(v, f"rewards[{i}]") for i, v in enumerate(rewards)]


def _pooling_scores(reply: Mapping[str, Any], count: int, label_index: int | None) -> list[float | str]:
    data = reply.get("data")
    if not isinstance(data, list):
        raise ReplyError(f"expected 'data': a list of {{index, data}}, got {_kind(data)}")
    out: list[float | str] = [f"the reply has no data item with index {i}" for i in range(count)]
    for position, item in enumerate(data):
        index = item.get("index", position) if isinstance(item, Mapping) else None
        if not isinstance(index, int) or not 0 <= index < count:
            shown = index if isinstance(index, int) else _kind(index)
            raise ReplyError(f"data[{position}] has index {shown}; expected 0..{count - 1}")
        out[index] = _pooled_value(item.get("data"), label_index, f"data[{position}].data")
    return out


def _pooled_value(value: Any, label_index: int | None, where: str) -> float | str:
    if isinstance(value, str):
        return f"{where} is encoded text; request floats (remove encoding_format or set it to 'float')"
    if isinstance(value, list) and value and isinstance(value[-1], list):
        value = value[-1]  # token-level output: the score of the last token
    if not isinstance(value, list):
        return _number(value, where)
    if label_index is not None:
        if not -len(value) <= label_index < len(value):
            return f"{where} has {len(value)} values; label_index {label_index} is out of range"
        return _number(value[label_index], f"{where}[{label_index}]")
    if len(value) != 1:
        return f"{where} has {len(value)} values; set label_index to pick the reward among them"
    return _number(value[0], f"{where}[0]")


def _number(value: Any, where: str) -> float | str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{where} is {_kind(value)}, not a number"
    if not math.isfinite(value):
        return f"{where} is {value}, not a finite number"
    return float(value)


def _kind(value: Any) -> str:
    """What a reply value is, by JSON type only: the reply's content never reaches a reason."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else "an object"
