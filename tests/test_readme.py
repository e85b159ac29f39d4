"""The manual's examples are true: every YAML resource in the README and the site's pages loads, and its Python
snippets run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import evalsi.rewards
from evalsi.server._config import load_config
from evalsi.specs import load_resources
from evalsi_harness import load_task
from tests.helpers.manual import ROOT, blocks


@pytest.mark.parametrize("index", range(len(blocks("yaml"))))
def test_yaml_resources_load(index: int, tmp_path: Path) -> None:
    text = blocks("yaml")[index]
    path = tmp_path / "resource.yaml"
    path.write_text(text)
    [resource] = load_resources(path)
    if resource.kind == "RewardSpec":
        assert evalsi.rewards.load(path).component_names
    elif resource.kind == "ServerConfig":
        assert load_config(path).spec.rewards.max_rollouts > 0
    elif resource.kind == "Task":
        assert load_task(path).max_steps > 0
    else:  # pragma: no cover - a new kind in the manual needs a check here
        pytest.fail(f"no check for the manual's resource kind {resource.kind}")


def test_python_quick_start_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = next(b for b in blocks("python") if "evalsi.rewards.load(" in b)
    monkeypatch.chdir(ROOT)
    exec(compile(snippet, "manual", "exec"), {})


def test_the_quick_start_outputs_are_ignored_by_git() -> None:
    """Following the manual leaves no untracked files: each output it names is covered by .gitignore."""
    import shutil
    import subprocess

    from evalsi.runs import load_run
    from evalsi.runs._results import journal_path

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")  # an installed package has no .gitignore to check
    outputs = re.findall(r"--output (\S+)", "\n".join(blocks("bash")))
    run = load_run(ROOT / "examples/finetuning/math-run.yaml")
    outputs += [str(run.output.relative_to(ROOT) if run.output.is_absolute() else run.output)]
    outputs += [str(journal_path(Path(outputs[-1])))]
    assert len(outputs) >= 3
    for output in outputs:
        ignored = subprocess.run(["git", "check-ignore", "-q", output], cwd=ROOT, check=False)
        assert ignored.returncode == 0, f"{output} (from the manual) is not in .gitignore"


def test_python_agent_task_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = next(b for b in blocks("python") if "TaskEnv(" in b)
    monkeypatch.chdir(ROOT)
    exec(compile(snippet, "manual", "exec"), {})


def test_the_evaluation_test_example_runs_and_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snippet = next(b for b in blocks("python") if "@evaluation_test(" in b)
    monkeypatch.setenv("EVALSI_RESULTS_DB", str(tmp_path / "results.sqlite"))
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(snippet, "manual", "exec"), namespace)
    test = namespace["test_capitals"]
    assert callable(test)
    test()  # both rows name the capital: score 1.0, standard error 0 -> passes
    from evalsi.testing import stored_results

    [stored] = stored_results()
    assert stored["evaluationTest"]["passed"] is True and stored["evaluationTest"]["score"] == 1.0


def test_the_training_example_names_only_what_exists() -> None:
    import evalsi.training
    import evalsi.training.callback

    snippet = next(b for b in blocks("python") if "lightning_checkpoint_callback" in b and "evalsi_callback(" in b)
    imported = re.findall(r"from (evalsi[\w.]*) import ([\w, ]+)", snippet)
    for module, names in imported:
        target = evalsi.training.callback if module.endswith("callback") else evalsi.training
        for name in names.split(","):
            assert hasattr(target, name.strip()), name


def test_the_readme_keeps_its_two_commands() -> None:
    """The README's first commands are the demo on embedded defaults and the whole test suite, both runnable."""
    from tests.helpers.manual import README

    first = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S)[0]
    commands = [line.split("#")[0].strip() for line in first.splitlines() if line.split("#")[0].strip()]
    assert commands == ["scripts/demo", "scripts/test"]
    for command in commands:
        assert (ROOT / command).is_file() and (ROOT / command).stat().st_mode & 0o111, command


def test_the_readme_links_into_pages_that_exist() -> None:
    """Every link from the README into the site names a page (and a heading on it) that is there."""
    from tests.helpers.manual import README

    links = re.findall(r"\]\((docs/[^)#\s]+)(?:#([\w-]+))?\)", README.read_text(encoding="utf-8"))
    assert len(links) >= 5
    for target, anchor in links:
        page = ROOT / target
        assert page.is_file(), f"README links to {target}, which is not there"
        if anchor and page.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
            assert anchor in slugs, f"README links to {target}#{anchor}; the page's headings are {sorted(slugs)}"


def test_every_page_is_in_the_site_and_every_reference_names_an_object() -> None:
    """mkdocs.yml lists every page under docs/, and each API page documents a module or object that exists."""
    import importlib

    from tests.helpers.manual import DOCS, MKDOCS

    listed = set(re.findall(r":\s*(\S+\.md)\s*$", MKDOCS.read_text(encoding="utf-8"), re.M))
    pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
    assert pages == listed, f"not in the nav: {sorted(pages - listed)}; missing: {sorted(listed - pages)}"
    api = (DOCS / "reference" / "api").glob("*.md")
    targets = [target for page in api for target in re.findall(r"^::: (\S+)", page.read_text(encoding="utf-8"), re.M)]
    assert "evalsi.rewards" in targets
    for target in targets:
        parts = target.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes of it
            try:
                found: object = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for name in parts[cut:]:
                found = getattr(found, name)
            break
        else:
            pytest.fail(f"the API reference documents {target}, which does not exist")
