"""Shared by the benches that time fresh processes: evalsi's bytecode written first, as installing it does."""

from __future__ import annotations

from pathlib import Path


def compile_evalsi() -> None:
    """Write evalsi's bytecode, as installing it does, so a fresh process measures start-up, not compilation.

    ``pip install`` compiles a package's modules; a source checkout run with ``PYTHONDONTWRITEBYTECODE`` (as CI and
    many containers set it) never caches them, and every fresh process would recompile the whole of evalsi while
    its dependencies, installed, load their bytecode.
    """
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("evalsi")
    if spec is not None and spec.origin is not None:
        compileall.compile_dir(Path(spec.origin).parent, quiet=2)
