"""``evalsi evaluators upload`` packs what git would track: .gitignore rules apply, .git and .venv never go."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from evalsi.cli._archive import PackError, pack, project_files


def _project(root: Path) -> None:
    files = {
        "test_eval.py": "x = 1\n",
        "requirements.txt": "\n",
        ".gitignore": "*.log\nbuild/\n!keep.log\n",
        "debug.log": "noise",
        "keep.log": "kept by a negation",
        "build/out.bin": "artefact",
        "data/rows.jsonl": "{}\n",
        "data/.gitignore": "secret.jsonl\n",
        "data/secret.jsonl": "{}\n",
        ".git/HEAD": "ref: refs/heads/main\n",
        ".venv/bin/python": "",
        "sub/.venv/lib/x.py": "",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_gitignore_rules_apply_below_their_directory_and_git_and_venv_are_never_packed(tmp_path: Path) -> None:
    _project(tmp_path)
    chosen = sorted(p.as_posix() for p in project_files(tmp_path))
    kept = [".gitignore", "data/.gitignore", "data/rows.jsonl", "keep.log", "requirements.txt", "test_eval.py"]
    assert chosen == kept
    with tarfile.open(fileobj=io.BytesIO(pack(tmp_path, 1 << 20)), mode="r:gz") as archive:
        assert sorted(archive.getnames()) == chosen
        assert archive.extractfile("test_eval.py").read() == b"x = 1\n"  # type: ignore[union-attr]


def test_a_link_out_of_the_project_or_an_oversized_archive_is_refused_before_upload(tmp_path: Path) -> None:
    _project(tmp_path)
    os.symlink("/etc/passwd", tmp_path / "passwd")
    with pytest.raises(PackError, match="passwd: a link pointing outside"):
        pack(tmp_path, 1 << 20)
    (tmp_path / "passwd").unlink()
    os.symlink("data/rows.jsonl", tmp_path / "rows.jsonl")  # inside: packed as the file (the server takes no links)
    with tarfile.open(fileobj=io.BytesIO(pack(tmp_path, 1 << 20)), mode="r:gz") as archive:
        assert archive.getmember("rows.jsonl").isfile()
        assert archive.extractfile("rows.jsonl").read() == b"{}\n"  # type: ignore[union-attr]
    os.symlink("data", tmp_path / "linked-data")
    with pytest.raises(PackError, match="linked-data: not a regular file or a link to one"):
        pack(tmp_path, 1 << 20)
    (tmp_path / "linked-data").unlink()
    (tmp_path / "big.bin").write_bytes(os.urandom(64 << 10))
    with pytest.raises(PackError, match=r"over 4096|exceeds 4096"):
        pack(tmp_path, 4096)
