"""Importing Ray, with an error that says how to install it (the ``ray`` extra)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from evalsi.errors import EvalsiError


class RayUnavailableError(EvalsiError, ImportError):
    """Ray is not installed in this environment."""


def import_ray() -> ModuleType:
    """The ``ray`` module.

    Raises:
        RayUnavailableError: Ray is not installed (``pip install 'evalsi[ray]'``).

    """
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise RayUnavailableError(
            f"evalsi on Ray needs the ray package ({exc}); install it with: pip install 'evalsi[ray]'"
        ) from None


def connect(address: str | None = None, namespace: str | None = None) -> ModuleType:
    """Ray, connected to the cluster at ``address`` (``auto``, ``ray://host:port``), unless already connected.

    Without an address, ``ray.init`` joins the cluster of ``RAY_ADDRESS`` or of a running ``ray start`` on this
    machine, and otherwise starts a local one, as Ray itself does.
    """
    ray = import_ray()
    if not ray.is_initialized():
        options: dict[str, Any] = {"address": address, "log_to_driver": True}
        if namespace is not None:
            options["namespace"] = namespace
        ray.init(**options)
    return ray
