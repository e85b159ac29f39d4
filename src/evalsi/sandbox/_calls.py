"""The call side of the fork server: frames, the plain-data codec, the program's call loop and the tester.

Stdlib only: this file is prepended to ``_server.py`` when the server starts (``python -I -S -c``), and imported
normally by the host, which decodes values with :func:`dec`. Only plain data (None, bool, int, float, str,
bytes, complex, list, tuple, dict, set, frozenset; exact types, never subclasses) crosses between the program
and the tester, so a program cannot hand the tests an object that equals everything.
"""

from __future__ import annotations

import builtins
import json
import os
import socket
import struct
import time
from typing import Any

MAX_FRAME = 64 << 20


def send_frame(sock: socket.socket, obj: Any) -> None:
    """Send ``obj`` as one frame: its JSON's 4-byte big-endian length, then the JSON.

    Args:
        sock: The socket.
        obj: A JSON-serialisable value.

    """
    sock.sendall(frame(obj))


def frame(obj: Any) -> bytes:
    """``obj`` as one frame: its JSON's 4-byte big-endian length, then the JSON.

    Args:
        obj: A JSON-serialisable value.

    Returns:
        The frame's bytes.

    """
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def recv_exact(sock: socket.socket, n: int, deadline: float | None = None, peer: str = "the peer") -> bytes:
    """Exactly ``n`` bytes from ``sock``, read in chunks of at most 1 MiB.

    Args:
        sock: The socket.
        n: How many bytes.
        deadline: When to give up (a :func:`time.monotonic` time); None: wait as long as the socket does.
        peer: Who is at the other end, as the errors name it.

    Raises:
        EOFError: The peer closed the socket first.
        TimeoutError: The deadline passed first.

    """
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer from {peer} in time")
            sock.settimeout(left)
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            raise EOFError(f"{peer} closed the channel")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def recv_frame(
    sock: socket.socket, limit: int = MAX_FRAME, deadline: float | None = None, peer: str = "the peer"
) -> Any:
    """One frame's JSON value (see :func:`send_frame`).

    Args:
        sock: The socket.
        limit: The largest frame accepted, in bytes.
        deadline: When to give up (a :func:`time.monotonic` time); None: wait as long as the socket does.
        peer: Who is at the other end, as the errors name it.

    Raises:
        ValueError: The frame is larger than ``limit``.
        EOFError: The peer closed the socket first.
        TimeoutError: The deadline passed first.

    """
    (n,) = struct.unpack(">I", recv_exact(sock, 4, deadline, peer))
    if n > limit:
        raise ValueError(f"a frame of {n} bytes from {peer} exceeds {limit}")
    return json.loads(recv_exact(sock, n, deadline, peer))


# ---- plain-data codec: the only values that cross between P and T --------------------------------------------


def enc(v: Any, depth: int = 0) -> Any:
    """``v`` as JSON, plain data only: a tuple, dict, set, bytes, complex or non-finite float is a tagged object.

    Args:
        v: The value.
        depth: How deep ``v`` is nested (past 200, it is refused).

    Raises:
        TypeError: ``v`` holds a value that is not plain data (a subclass included).
        ValueError: ``v`` is nested too deeply.

    """
    if depth > 200:
        raise ValueError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        return v if v == v and v not in (float("inf"), float("-inf")) else {"x": repr(v)}
    if t is list:
        return [enc(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [enc(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "f": [enc(x, depth + 1) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [enc(v.real), enc(v.imag)]}
    raise TypeError(f"a value of type {t.__name__} is not plain data")


def dec(v: Any) -> Any:
    """The value :func:`enc` encoded.

    Args:
        v: The encoded value.

    Raises:
        ValueError: A tagged object is malformed or its tag unknown.

    """
    if isinstance(v, list):
        return [dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if len(v) != 1:
        raise ValueError("malformed value")
    ((tag, body),) = v.items()
    if tag == "t":
        return tuple(dec(x) for x in body)
    if tag == "d":
        return {dec(k): dec(x) for k, x in body}
    if tag in ("s", "f"):
        items = [dec(x) for x in body]
        return set(items) if tag == "s" else frozenset(items)
    if tag == "b":
        return bytes.fromhex(body)
    if tag == "c":
        return complex(dec(body[0]), dec(body[1]))
    if tag == "x":
        return float(body)
    raise ValueError(f"unknown tag {tag!r}")


def callables(g: dict[str, Any]) -> dict[str, Any]:
    """The program's top-level functions, plus the methods of a LeetCode-style ``Solution`` class."""
    found = {k: v for k, v in g.items() if callable(v) and not k.startswith("__")}
    solution = g.get("Solution")
    if isinstance(solution, type):
        try:
            instance = solution()
            for name in dir(instance):
                if not name.startswith("_") and name not in found and callable(getattr(instance, name)):
                    found[name] = getattr(instance, name)
        except Exception:
            pass
    return found


def serve_calls(g: dict[str, Any], sock: socket.socket) -> None:
    """The program's call loop: announce its functions, then answer each call on ``sock`` until it closes.

    Args:
        g: The program's globals.
        sock: The socket to the tester.

    """
    g = callables(g)
    send_frame(sock, {"names": dict.fromkeys(g, "fn")})
    while True:
        try:
            req = recv_frame(sock)
        except EOFError:
            return
        try:
            fn = g[req["fn"]]
            result = fn(*dec(req["args"]), **dec(req["kwargs"]))
            reply: dict[str, Any] = {"ok": enc(result)}
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            reply = {"exc": type(exc).__name__, "msg": str(exc)[:2000]}
        try:
            send_frame(sock, reply)
        except TypeError as exc:
            send_frame(sock, {"exc": "TypeError", "msg": str(exc)})


class RemoteError(Exception):
    """An exception raised by the program inside a call."""


_EXC = {n: getattr(builtins, n) for n in dir(builtins) if isinstance(getattr(builtins, n), type)}
_EXC_ALL = frozenset(dir(builtins))


class Remote:
    """T's stand-in for one of P's functions: arguments and results cross as plain data only."""

    def __init__(self, sock: socket.socket, name: str, limit: int) -> None:
        self._sock, self._name, self._limit = sock, name, limit
        self.__name__ = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        send_frame(self._sock, {"fn": self._name, "args": enc(list(args)), "kwargs": enc(kwargs)})
        try:
            reply = recv_frame(self._sock, self._limit)
        except EOFError:
            raise RemoteError(f"the program exited during a call to {self._name}()") from None
        if "ok" in reply:
            return dec(reply["ok"])
        kind = _EXC.get(str(reply.get("exc")), RemoteError)
        if not (isinstance(kind, type) and issubclass(kind, Exception)):
            kind = RemoteError
        raise kind(f"{reply.get('exc')}: {reply.get('msg')}")


def tester_main(host: int, peer: int, limit: int) -> None:
    """Body of T: read the tests from the host, run them against P, write the verdict with the nonce."""
    out = socket.socket(fileno=host)
    payload = recv_frame(out)
    nonce = payload["nonce"]
    try:
        sock = socket.socket(fileno=peer)
        try:
            hello = recv_frame(sock, limit)
        except EOFError:
            raise RemoteError("the program exited before defining its functions") from None
        ns: dict[str, Any] = {"__name__": "__test__", "__builtins__": builtins}
        named = {payload.get("entry_point"), payload.get("fn")}
        for name in hello.get("names", {}):
            # never let the program shadow a builtin the tests use (an `abs` that returns 0 passes `abs(x-y) < e`),
            # unless the dataset names it as the function under test
            if not (isinstance(name, str) and name.isidentifier() and not name.startswith("__")):
                continue
            if name not in _EXC_ALL or name in named:
                ns[name] = Remote(sock, name, limit)
        verdict = run_tests(payload, ns)
    except BaseException as exc:
        verdict = {"passed": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
    verdict["nonce"] = nonce
    send_frame(out, verdict)
    os._exit(0)


def run_tests(payload: dict[str, Any], ns: dict[str, Any]) -> dict[str, Any]:
    """The tester's verdict for one test payload: a ``call`` case's value, or whether the test code passed.

    Args:
        payload: The test: ``call`` (a function and its arguments), or test code run against the program.
        ns: The namespace the test code runs in.

    """
    kind = payload["kind"]
    if kind == "call":
        fn = ns.get(payload["fn"])
        if fn is None:
            return {"passed": False, "error": f"the program defines no function {payload['fn']!r}"}
        return {"value": enc(fn(*payload_args(payload["args"])))}
    exec(compile(payload.get("setup", ""), "<test setup>", "exec"), ns)
    exec(compile(payload["code"], "<test>", "exec"), ns)
    if kind == "check":
        entry = ns.get(payload["entry_point"])
        if entry is None:
            return {"passed": False, "error": f"the program defines no function {payload['entry_point']!r}"}
        ns["check"](entry)
    return {"passed": True}


def payload_args(args: Any) -> list[Any]:
    """A call's positional arguments: a list as given, any other value as the one argument.

    Args:
        args: The test's ``args``.

    """
    return list(args) if isinstance(args, list) else [args]
