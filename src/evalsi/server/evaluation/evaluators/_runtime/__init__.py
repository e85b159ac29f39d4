"""What an uploaded evaluator's sandbox holds besides its own files: a stand-in ``evalsi.testing`` and the runner.

Both are standard-library Python, copied into a runtime directory that build and scoring sandboxes mount
read-only: the server's own interpreter, packages and files never enter the sandbox. The stand-in's
``EvaluationRow``, ``Message`` and ``EvaluateResult`` are the library's own source, so a scoring function sees the
same row it sees in pytest.
"""

from __future__ import annotations

import hashlib
import os
from importlib import resources
from pathlib import Path

_INIT = (
    '"""evalsi.testing inside an evaluator sandbox: the row and result types and a recording decorator."""\n'
    "from evalsi.testing._row import EvaluateResult, EvaluationRow, Message, MetricResult\n"
    "from evalsi.testing._shim import *  # noqa: F403\n"
)


def _sources() -> dict[str, str]:
    """Relative path -> text of every runtime file."""
    own = resources.files(__name__)
    testing = resources.files("evalsi.testing")  # read as text, not imported: the sandbox imports it
    return {
        "evalsi/__init__.py": '"""evalsi inside an evaluator sandbox: only evalsi.testing."""\n',
        "evalsi/testing/__init__.py": _INIT,
        "evalsi/testing/_row.py": testing.joinpath("_row.py").read_text(encoding="utf-8"),
        "evalsi/testing/_models.py": testing.joinpath("_models.py").read_text(encoding="utf-8"),
        "evalsi/testing/_shim.py": own.joinpath("shim.py").read_text(encoding="utf-8"),
        "evalsi_runner.py": own.joinpath("runner.py").read_text(encoding="utf-8"),
    }


def runtime_dir(storage: Path) -> Path:
    """The runtime directory under ``storage`` for this version of the sources, written on first use.

    Its name carries a digest of the sources, so an upgraded server never mixes old and new files; every file is
    world-readable (sandboxes run as unprivileged uids) and owned by the server.
    """
    sources = _sources()
    digest = hashlib.sha256("\0".join(f"{k}\0{v}" for k, v in sorted(sources.items())).encode()).hexdigest()[:16]
    target = storage / f"runtime-{digest}"
    if (target / "evalsi_runner.py").is_file():
        return target
    staging = storage / f".runtime-{digest}-{os.getpid()}"
    for relative, text in sources.items():
        path = staging / relative
        path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o644)
    for folder in (staging, staging / "evalsi", staging / "evalsi" / "testing"):
        folder.chmod(0o755)
    try:
        staging.rename(target)
    except OSError:  # another server process wrote it first
        import shutil

        shutil.rmtree(staging, ignore_errors=True)
    return target
