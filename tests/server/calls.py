"""Any RPC of the server as data: its service, method, JSON route and request, called over each protocol."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
from google.protobuf import json_format
from google.protobuf.message import Message

from tests.server.harness import ServerProcess

PACKAGE = "evalsi.v1alpha1"


@dataclass(frozen=True)
class Outcome:
    """How a call was answered, alike on every protocol: its status, the error's message and the answer's body.

    ``status`` is the HTTP status on HTTP JSON ("200", "429"), the canonical code on Connect and gRPC ("ok",
    "resource_exhausted").
    """

    status: str
    message: str
    body: Any = None


@dataclass(frozen=True)
class Call:
    """One RPC with a request message, as data: its service, method, JSON route and request (JSON form)."""

    service: str
    method: str
    path: str
    request: type[Message]
    body: dict[str, Any]

    def http(self, server: ServerProcess, token: str, timeout: float = 120) -> int:
        """HTTP JSON: the answer's status."""
        headers = {"Authorization": f"Bearer {token}"}
        return httpx.post(server.http + self.path, json=self.body, headers=headers, timeout=timeout).status_code

    def connect(self, server: ServerProcess, token: str, timeout: float = 120) -> int:
        """Connect with the JSON codec: the answer's status."""
        headers = {"Authorization": f"Bearer {token}", "Connect-Protocol-Version": "1"}
        url = f"{server.http}/{PACKAGE}.{self.service}/{self.method}"
        return httpx.post(url, json=self.body, headers=headers, timeout=timeout).status_code

    @functools.cached_property
    def message(self) -> Message:
        """The request message."""
        return json_format.ParseDict(self.body, self.request())

    def grpc(self, server: ServerProcess, token: str, timeout: float = 120) -> str:
        """gRPC: the status code's name."""
        message = self.message
        with grpc.insecure_channel(server.grpc, options=[("grpc.max_send_message_length", -1)]) as channel:
            method: grpc.UnaryUnaryMultiCallable[Message, bytes] = channel.unary_unary(
                f"/{PACKAGE}.{self.service}/{self.method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=lambda raw: raw,
            )
            try:
                method(message, metadata=(("authorization", f"Bearer {token}"),), timeout=timeout)
            except grpc.RpcError as exc:
                return str(exc.code().name)
        return "OK"

    def answer(self, protocol: str, server: ServerProcess, token: str, timeout: float = 120) -> Outcome:
        """The call over ``protocol`` (one of :data:`PROTOCOLS`), and how it was answered."""
        headers = {"Authorization": f"Bearer {token}"}
        if protocol == "http":
            response = httpx.post(server.http + self.path, json=self.body, headers=headers, timeout=timeout)
            body = response.json()
            error = body.get("error") if isinstance(body, dict) else None
            return Outcome(str(response.status_code), str(error["message"]) if error else "", body)
        if protocol == "connect":
            url = f"{server.http}/{PACKAGE}.{self.service}/{self.method}"
            connect = {**headers, "Connect-Protocol-Version": "1"}
            response = httpx.post(url, json=self.body, headers=connect, timeout=timeout)
            body = response.json()
            if response.status_code == 200:
                return Outcome("ok", "", body)
            return Outcome(str(body.get("code")), str(body.get("message")), body)
        with grpc.insecure_channel(server.grpc, options=[("grpc.max_send_message_length", -1)]) as channel:
            method: grpc.UnaryUnaryMultiCallable[Message, bytes] = channel.unary_unary(
                f"/{PACKAGE}.{self.service}/{self.method}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=lambda raw: raw,
            )
            try:
                raw = method(self.message, metadata=(("authorization", f"Bearer {token}"),), timeout=timeout)
            except grpc.RpcError as exc:
                return Outcome(str(exc.code().name).lower(), str(exc.details()))
        return Outcome("ok", "", raw)


PROTOCOLS = ("http", "connect", "grpc")
"""The protocols every call is answered on (the names of :class:`Call`'s methods)."""
