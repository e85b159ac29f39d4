"""Separate environments for the integrations that bring heavy dependencies (torch, trainers).

`nox -s integrations` runs every integration session; the core suite (scripts/test --core) needs none of them.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nox

# Set by CI (.ci/run): each session's environment is deleted when the session ends, so the integration run needs
# the disk of its largest environment (a few GB with torch), not of all of them at once.
DISCARD_ENVS = os.environ.get("EVALSI_DISCARD_ENVS") == "1"

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True

# Every extra in pyproject.toml; the `extras` session installs each alone and runs its own commands.
EXTRAS: list[str] = [
    "math", "parquet", "hf", "serve", "view", "server", "trl", "torch", "lightning", "gym", "images", "plot", "remote",
    "mlflow", "ray", "tensorboard", "wandb", "dev",
]  # fmt: skip
INTEGRATIONS: list[str] = [
    "trl", "verl", "hf", "torch", "lightning", "browser", "mlflow", "loggers", "ray", "docs",
    *(f"extras(extra='{e}')" for e in EXTRAS),
]  # fmt: skip


@nox.session(name="integrations", python=False)
def integrations(session: nox.Session) -> None:
    """Run every integration session in turn."""
    for name in INTEGRATIONS:
        session.notify(name)


def discarded_after(body: Callable[..., None]) -> Callable[..., None]:
    """Wrap a session so that, under EVALSI_DISCARD_ENVS=1, its environment is deleted when it ends (passed or
    failed); the free disk is printed first, so a run that fills the disk says where."""

    @functools.wraps(body)
    def run(session: nox.Session, *args: Any, **kwargs: Any) -> None:
        try:
            body(session, *args, **kwargs)
        finally:
            if DISCARD_ENVS:
                location = Path(session.virtualenv.location)
                usage = shutil.disk_usage(location.parent)
                session.log(f"free disk {usage.free / 2**30:.1f} GiB; deleting {location}")
                shutil.rmtree(location, ignore_errors=True)

    return run


@nox.session(name="trl")
@discarded_after
def trl(session: nox.Session) -> None:
    """GRPOTrainer with evalsi rewards on a tiny local model; OpenRLHF's own SingleTurnAgentExecutor (CPU)."""
    # Versions pinned to the ones these tests were written against, so a new release cannot break CI unseen.
    # tensorboard: the trainer's TensorBoard logging, read back by the tests.
    session.install(
        "torch==2.13.0",
        "trl==1.16.0",
        "transformers==5.24.0",
        "tensorboard==2.21.0",
        "aiohttp",
        "pylatexenc",
        "-e",
        ".[dev,trl,serve]",
    )
    # OpenRLHF pins deepspeed/flash-attn, which need a GPU; the executor we drive does not.
    session.install("--no-deps", "openrlhf==0.11.2")
    tests = ["tests/integrations/trl", "tests/integrations/openrlhf"]
    session.run("pytest", "-q", *tests, env={"EVALSI_INTEGRATION": "1"})


@nox.session(name="verl")
@discarded_after
def verl(session: nox.Session) -> None:
    """verl's Naive and Batch reward managers score a DataProto through evalsi/rewards/verl.py (CPU); a verl FSDP
    actor checkpoint saved by verl is merged by its model merger and served."""
    session.install("torch==2.13.0", "verl==0.9.1", "transformers==5.10.4", "ray==2.60.0", "-e", ".[dev]")
    session.run("pytest", "-q", "tests/integrations/verl", env={"EVALSI_INTEGRATION": "1"})


@nox.session(name="hf")
@discarded_after
def hf(session: nox.Session) -> None:
    """Datasets by Hugging Face name load through the `datasets` package (offline, from a local dataset folder).

    The core suite runs without `datasets` and checks the missing-package error; this session runs the same
    tests with it installed, so both paths are exercised.
    """
    session.install("-e", ".[dev,math,hf]")
    tests = ["tests/runs/test_datasets.py", "tests/runs/test_builtin.py"]
    session.run("pytest", "-q", *tests, env={"HF_HUB_OFFLINE": "1"})


@nox.session(name="browser")
@discarded_after
def browser(session: nox.Session) -> None:
    """`evalsi view` in a real browser: Playwright drives the system's Chromium (installed here when missing).

    Playwright's own browser download is not used: the tests launch /usr/bin/chromium by its path.
    EVALSI_SCREENSHOTS=DIR also saves the main pages as PNG files there (docs/images in the README).
    """
    session.run("bash", "-c", "source scripts/_setup.sh && ensure_browser_packages", external=True)
    session.install("playwright==1.65.2", "-e", ".[dev,math,view,serve,server]")  # math: the example run it shows
    env = {"EVALSI_INTEGRATION": "1", "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"}
    session.run("pytest", "-q", "-p", "no:randomly", "tests/integrations/browser", env=env)


@nox.session(name="torch")
@discarded_after
def torch(session: nox.Session) -> None:
    """Checkpoints served in-process by transformers (CPU); the Trainer callback and the PyTorch hook that evaluate
    each save (DDP on gloo included); sharded checkpoints (torch DCP, DeepSpeed ZeRO) converted and served."""
    session.install("torch==2.13.0", "transformers==5.24.0", "accelerate>=1.1.0", "tensorboard==2.21.0", "-e", ".[dev]")
    # DeepSpeed (ZeRO checkpoints and zero_to_fp32) is an sdist whose setup imports torch; no ops are compiled.
    session.install("--no-build-isolation", "deepspeed==0.19.8", env={"DS_BUILD_OPS": "0"})
    session.run("pytest", "-q", "tests/integrations/torch", env={"EVALSI_INTEGRATION": "1", "HF_HUB_OFFLINE": "1"})


@nox.session(name="lightning")
@discarded_after
def lightning(session: nox.Session) -> None:
    """lightning_checkpoint_callback in a real Lightning Trainer on the CPU."""
    session.install("torch==2.13.0", "pytorch-lightning==2.6.6", "tensorboard==2.21.0", "-e", ".[dev]")
    session.run("pytest", "-q", "tests/integrations/lightning", env={"EVALSI_INTEGRATION": "1"})


@nox.session(name="mlflow")
@discarded_after
def mlflow(session: nox.Session) -> None:
    """`mlflow:<model>` checkpoint sources against a real `mlflow server` (sqlite store, proxied artifacts)."""
    # 3.17.2: the newest release whose mlflow-skinny and mlflow-tracing are on the index too.
    session.install("mlflow==3.17.2", "-e", ".[dev,mlflow]")
    session.run("pytest", "-q", "-p", "no:randomly", "tests/integrations/mlflow", env={"EVALSI_INTEGRATION": "1"})


@nox.session(name="loggers")
@discarded_after
def loggers(session: nox.Session) -> None:
    """`--log-to tensorboard,wandb` from `evalsi run` and `evalsi checkpoints`, read back with the real libraries:
    TensorBoard's event reader, W&B's offline run files."""
    session.install("tensorboardX==2.6.5", "tensorboard==2.21.0", "wandb==0.30.0", "-e", ".[dev]")
    session.run("pytest", "-q", "-p", "no:randomly", "tests/integrations/loggers", env={"EVALSI_INTEGRATION": "1"})


@nox.session(name="ray")
@discarded_after
def ray(session: nox.Session) -> None:
    """evalsi on a real two-node Ray cluster started by the tests (`ray start`), whose processes the tests stop after.

    The reward pool, its cache and limiter actors, faults (a killed actor, a hung worker), Ray Data offline
    scoring, and verl's reward loop and OpenRLHF's reward function scoring through the pool; then
    `bench/ray_scaling.py --quick`.
    """
    session.install(
        "ray[data]==2.60.0",
        "torch==2.13.0",
        "verl==0.9.1",
        "transformers==5.10.4",
        "aiohttp",
        "-e",
        ".[dev,math,parquet,server,ray]",  # server: the pool scores into the server's shared cache too
    )
    session.install("--no-deps", "openrlhf==0.11.2")
    env = {"EVALSI_INTEGRATION": "1"}
    # --timeout: the first test's bound also covers starting the two nodes, slow on a busy machine
    tests = ["tests/integrations/ray", "--timeout=1200"]
    session.run("pytest", "-q", "-p", "no:randomly", "-p", "no:xdist", *tests, env=env)
    # the benchmark's smoke run: the pool against in-process on a local Ray instance (prints ratios, asserts none)
    session.run("python", "bench/ray_scaling.py", "--quick")


# torch as the other sessions pin it (the CPU build this machine keeps); nothing else beside an extra.
EXTRA_PINS: dict[str, list[str]] = {
    "trl": ["torch==2.13.0"],
    "torch": ["torch==2.13.0"],
    "lightning": ["torch==2.13.0"],
}
# Test tools, in an environment of their own (never the one under test): stand-ins for S3 (moto's server), GCS
# (an emulator of its JSON API) and an MLflow tracking server.
EXTRAS_TOOLS: list[str] = ["moto[server]==5.2.5", "gcp-storage-emulator==2026.7.19", "mlflow==3.17.2"]


@nox.session(name="docs")
@discarded_after
def docs(session: nox.Session) -> None:
    """The manual (mkdocs.yml, docs/) built with warnings as errors: a broken link or anchor, a page left out of the
    nav, or an API docstring that does not parse as Google style fails the build."""
    # Pinned to the versions the manual was written against, so a new release cannot break the strict build unseen.
    session.install(
        "mkdocs==1.6.1",
        "mkdocs-material==9.8.2",
        "mkdocstrings==1.0.8",
        "mkdocstrings-python==2.0.11",
        "mkdocs-autorefs==1.4.5",
        "griffelib==2.4.1",
        "-e",
        ".[docs]",
    )
    session.run("python", "-m", "doctest", "scripts/griffe_docstrings.py")  # the docstrings' rewriting
    site = str(Path(session.create_tmp()) / "site")
    session.run("mkdocs", "build", "--strict", "--site-dir", site, env={"NO_MKDOCS_2_WARNING": "1"})


@nox.session(name="extras", venv_backend="uv", reuse_venv=False)
@nox.parametrize("extra", EXTRAS)
@discarded_after
def extras(session: nox.Session, extra: str) -> None:
    """Each extra installed alone in a fresh environment (`pip install 'evalsi[EXTRA]'`, no test tools beside
    it), then its own commands run from outside by tests/extras/check.py: the server answers /healthz, the viewer
    serves a page, remote locations open on s3://, gs:// and hf:// stand-ins, and so on."""
    session.install(*_uv_options(), *EXTRA_PINS.get(extra, []), f".[{extra}]")
    driver = sys.executable  # the driver imports no evalsi: any interpreter with the standard library will do
    if extra in ("remote", "mlflow"):
        driver = str(_extras_tools(session) / "bin" / "python")
    environment = str(session.virtualenv.location)
    session.run(driver, "-m", "tests.extras.check", extra, "--env", environment, "--tools", str(TOOLS.resolve()),
                external=True)  # fmt: skip


TOOLS = Path(".nox") / "extras-tools"


def _uv() -> str:
    return shutil.which("uv") or str(Path(sys.executable).with_name("uv"))


def _extras_tools(session: nox.Session) -> Path:
    """The test tools' environment (kept between runs; uv checks it is complete in a moment)."""
    if not (TOOLS / "bin" / "python").exists():
        session.run(_uv(), "venv", "-q", "--python", sys.executable, str(TOOLS), external=True)
    python = str(TOOLS / "bin" / "python")
    session.run(_uv(), "pip", "install", "-q", "--python", python, *_uv_options(), *EXTRAS_TOOLS, external=True)
    return TOOLS.resolve()


def _uv_options() -> list[str]:
    """uv follows this machine's pip configuration (its wheel folders, extra indexes and constraints), taking the
    best version across indexes as pip does."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    flags = {"find-links": "--find-links", "extra-index-url": "--extra-index-url", "index-url": "--index-url",
             "constraint": "--constraint"}  # fmt: skip
    options = ["--index-strategy", "unsafe-best-match"]
    for line in listing.splitlines():
        key, _, value = line.partition("=")
        flag = flags.get(key.rsplit(".", 1)[-1])
        for item in value.strip().strip("'\"").split():
            local = item.removeprefix("file://")
            if flag and (local == item or os.path.exists(local)) and item not in options:
                options += [flag, item]
    return options
