"""Importing a Python file named in a spec (a callable target, an evaluation test, a task's checker) as a module.

Each file is imported once per process under a private module name derived from its resolved path, so two specs
naming the same file share its module, and files with the same name in different folders never collide.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: Path, prefix: str) -> ModuleType:
    """The module of the Python file at ``path`` (imported on first use, cached in ``sys.modules``).

    Raises:
        ImportError: The file does not exist or cannot be imported as Python (the message names it).
        Exception: Whatever the file's own code raises while it is imported.

    """
    resolved = path.resolve()
    if not resolved.is_file():
        raise ImportError(f"no such file: {path}")
    name = f"{prefix}_{hashlib.sha256(str(resolved).encode()).hexdigest()[:16]}"
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]  # a failed import is not remembered: fixing the file and retrying works
        raise
    return module
