"""What a target is sent of a dataset row: its messages rebuilt from an allow-list, never forwarded as stored.

Each message becomes ``{"role", "content"}`` and nothing else (no ``tool_calls``, ``name``, ``function_call`` or
unknown fields): the role must be ``system``, ``user`` or ``assistant``, the content text or a list of content
parts. A ``text`` part is kept as text; an ``image_url`` part only when the operator enabled images on the
target (``image_url_prefixes``) and its URL starts with one of the prefixes given there, so a row cannot point a
multimodal endpoint at an address of the operator's network. Any other part fails the row, naming it.
"""

from __future__ import annotations

from typing import Any

from evalsi.server.evaluation._config import TargetConfig

ROLES = ("system", "user", "assistant")
_DETAILS = ("auto", "low", "high")


class Refused(Exception):
    """A row whose messages cannot be sent to the target; ``reason`` names where and why (fit for the tenant)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def prompt_messages(messages: Any, name: str, target: TargetConfig) -> list[dict[str, Any]]:
    """The chat messages sent to target ``name`` for a row's ``messages``.

    Raises:
        Refused: A role, a content part or an image URL the target may not be sent, naming the message.

    """
    if not isinstance(messages, list) or not messages:
        raise Refused("messages: the row has no messages to send")
    out: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise Refused(f"{where}: not a message object")
        role = message.get("role")
        if role not in ROLES:
            raise Refused(f"{where}.role: {str(role)[:40]!r} is never sent to a target (valid: {', '.join(ROLES)})")
        out.append({"role": role, "content": _content(message.get("content"), where, name, target)})
    return out


def _content(content: Any, where: str, name: str, target: TargetConfig) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise Refused(f"{where}.content: no text to send (a message's content is text or a list of content parts)")
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        at = f"{where}.content[{index}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            parts.append(_image(part.get("image_url"), at, name, target))
        else:
            raise Refused(f"{at}: a {str(kind)[:40]!r} part is never sent to a target (valid: text, image_url)")
    return parts


def _image(value: Any, at: str, name: str, target: TargetConfig) -> dict[str, Any]:
    if not target.image_url_prefixes:
        raise Refused(f"{at}: target {name!r} is sent text only (the operator enables images per target)")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not any(url.startswith(prefix) for prefix in target.image_url_prefixes):
        raise Refused(f"{at}.image_url.url: not an address the operator allows images from on target {name!r}")
    image: dict[str, Any] = {"url": url}
    detail = value.get("detail") if isinstance(value, dict) else None
    if detail in _DETAILS:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}
