"""A minimal root filesystem directory built from the host's own files, to test images without a registry.

It holds Python (with its standard library), dash as ``/bin/sh``, a few coreutils, the libraries they link
against, and a marker file ``/etc/image-release``; files are hard links where the filesystem allows (fast), else
copies. Nothing else of the host is in it: no bash, no git.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"
TOOLS = ("cat", "cp", "mkdir", "dirname", "ls", "true", "rm", "sleep")
MARKER = "evalsi test image 1\n"


def _place(source: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(os.path.realpath(source), target)
    except OSError:
        shutil.copy2(os.path.realpath(source), target)


def _libraries(binaries: list[str]) -> set[str]:
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True, check=False).stdout
    return set(re.findall(r"(/\S+\.so[\S]*)", out))


def build_rootfs(root: Path) -> Path:
    """Build the image under ``root`` and return it; requires the host's ``/usr/bin/python3.X`` and dash."""
    python = f"/usr/bin/{PYTHON}"
    binaries = [python, "/usr/bin/dash", *(shutil.which(t, path="/usr/bin:/bin") or f"/usr/bin/{t}" for t in TOOLS)]
    for binary in binaries:
        _place(binary, root / "usr/bin" / os.path.basename(binary))
    for library in _libraries(binaries):
        _place(library, root / library.lstrip("/").replace("lib/", "usr/lib/", 1).replace("lib64/", "usr/lib64/", 1))
    (root / "usr/bin/python3").symlink_to(PYTHON)
    (root / "usr/bin/sh").symlink_to("dash")
    stdlib = Path(f"/usr/lib/{PYTHON}")
    for dirpath, _, filenames in os.walk(stdlib):
        if "__pycache__" in dirpath or "/test" in dirpath:
            continue
        for name in filenames:
            source = os.path.join(dirpath, name)
            _place(source, root / source.lstrip("/"))
    for link, target in (("bin", "usr/bin"), ("lib", "usr/lib"), ("lib64", "usr/lib64")):
        (root / link).symlink_to(target)
    (root / "usr/lib64").mkdir(exist_ok=True)
    (root / "etc").mkdir()
    (root / "etc/image-release").write_text(MARKER)
    for dirpath, _, _ in os.walk(root):
        os.chmod(dirpath, 0o755)
    return root
