"""Reading a streamed OpenAI completion (``stream: true``: server-sent events) in time linear in its length.

A 32k-token completion arrives as tens of thousands of events, each split across network reads anywhere. The
reader never grows a buffer by concatenation: a line's bytes are copied once when the line is complete (the
pieces of a line split across reads are joined once), and each choice's text pieces are kept in a list and
joined once at the end. :attr:`StreamedCompletion.copied` and :attr:`StreamedCompletion.joins` count that work,
so a test can check it grows with the stream's length, not with its square.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    import aiohttp


class StreamError(ValueError):
    """The stream is not OpenAI's server-sent events, or the server reported an error inside it."""


@dataclass
class _Choice:
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None


class StreamedCompletion:
    """Feed it the bytes of a streamed ``/chat/completions`` or ``/completions`` answer as they arrive."""

    def __init__(self, api: str) -> None:
        self.api = api
        self.choices: dict[int, _Choice] = {}
        self.completion_tokens: int | None = None
        self.done = False
        self.copied = 0
        """Bytes copied into complete lines (each byte of the stream at most once)."""
        self.joins = 0
        """Joins of pieces: of a line split across reads, and of each choice's text at the end."""
        self._partial: list[bytes] = []
        self._data: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream (any split; lines may span reads)."""
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            piece = chunk[start:end]
            if self._partial:
                self._partial.append(piece)
                line = b"".join(self._partial)
                self._partial.clear()
                self.joins += 1
            else:
                line = piece
            self.copied += len(line)
            self._line(line)
            start = end + 1
        if start < len(chunk):
            self._partial.append(chunk[start:])

    def close(self) -> None:
        """The stream ended: take a last line without its newline, and the event it ends."""
        if self._partial:
            line = b"".join(self._partial)
            self._partial.clear()
            self.joins += 1
            self.copied += len(line)
            self._line(line)
        self._dispatch()

    def _line(self, line: bytes) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if not line:
            self._dispatch()
        elif line.startswith(b"data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(b" ") else value)
        # comments (":") and the other fields (event, id, retry) carry nothing a completion needs

    def _dispatch(self) -> None:
        if not self._data:
            return
        data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
        self._data = []
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise StreamError(f"an event of the stream is not JSON ({len(data):,} bytes)") from None
        if not isinstance(event, dict):
            raise StreamError("an event of the stream is not a JSON object")
        if event.get("error") is not None:
            raise StreamError("the server reported an error in the stream")
        self._take(event)

    def _take(self, event: dict[str, Any]) -> None:
        usage = event.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.completion_tokens = usage["completion_tokens"]
        for raw in event.get("choices") or ():
            if not isinstance(raw, dict):
                raise StreamError("a choice of the stream is not a JSON object")
            choice = self.choices.setdefault(int(raw.get("index") or 0), _Choice())
            if self.api == "chat":
                delta = raw.get("delta") or {}
                text = delta.get("content") if isinstance(delta, dict) else None
            else:
                text = raw.get("text")
            if isinstance(text, str) and text:
                choice.pieces.append(text)
            if raw.get("finish_reason") is not None:
                choice.finish_reason = str(raw["finish_reason"])

    def texts(self) -> list[tuple[str, str | None]]:
        """Each choice's whole text and finish reason, by index (each text joined once)."""
        out: list[tuple[str, str | None]] = []
        for index in sorted(self.choices):
            choice = self.choices[index]
            out.append(("".join(choice.pieces), choice.finish_reason))
            self.joins += 1
        return out


async def read_stream(api: str, body: aiohttp.StreamReader) -> StreamedCompletion:
    """Read a streamed answer's body to its end into a :class:`StreamedCompletion`."""
    completion = StreamedCompletion(api)
    async for chunk in body.iter_any():
        completion.feed(chunk)
    completion.close()
    return completion
