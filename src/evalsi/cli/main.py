"""The ``evalsi`` command line.

Exit codes: 0 ok, 1 failed work, 2 bad usage or input, 3 a gate or regression failed. Options are never read
from the environment: only the variables listed in ``ENVIRONMENT`` change behaviour.
"""

from __future__ import annotations

import gc
from typing import ClassVar

import typer

from evalsi import __version__
from evalsi.cli._lazy import LazyGroup, resume_collection

ENVIRONMENT = (
    "Environment (no other variable changes behaviour):\n\n"
    "EVALSI_REWARD_SPEC: the RewardSpec file of the OpenRLHF reward file and the verl function (unless given);\n\n"
    "EVALSI_SERVER: the OpenRLHF reward file scores through this evalsi server, and the server `evalsi "
    "evaluators upload|get|log`, `evalsi datasets` and `evalsi jobs` talk to (unless --server is given);\n\n"
    "EVALSI_TOKEN: the bearer token sent to an evalsi server;\n\n"
    "EVALSI_RAY_POOL, EVALSI_RAY_WORKERS: the name and actors of the reward pool of the OpenRLHF reward file on Ray "
    "(evalsi/ray/openrlhf.py);\n\n"
    "EVALSI_MONITOR, EVALSI_MONITOR_BATCH, EVALSI_MONITOR_STOP_ON, EVALSI_MONITOR_STOP_FILE: the OpenRLHF reward "
    "file logs the training monitors over batches of this many rollouts, and writes the stop file when a named "
    "signal fires;\n\n"
    "the variable a target's apiKeyEnv or a judge's api_key_env names: that API key;\n\n"
    "EVALSI_PASSED_THRESHOLD, EVALSI_NUM_RUNS, EVALSI_MAX_ROWS, EVALSI_COMPLETION_PARAMS: override an evaluation "
    "test's threshold, runs, rows and completion params (CI);\n\n"
    "EVALSI_RESULTS_DB: where evaluation test results are stored (default .evalsi/results.sqlite);\n\n"
    "EVALSI_IMAGE_CACHE: where agent-task images are unpacked (default /var/cache/evalsi/images as root, else "
    "~/.cache/evalsi/images);\n\n"
    "EVALSI_CACHE_DIR: where math-equiv's workers keep the LaTeX parser's learned decisions (default "
    "$XDG_CACHE_HOME/evalsi, else ~/.cache/evalsi);\n\n"
    "EVALSI_PROVIDERS, <PROVIDER>_BASE_URL, <PROVIDER>_API_KEY: where an evaluation test's PROVIDER/NAME model is "
    "served, and its key;\n\n"
    "EVALSI_SANDBOX_CGROUP=off: bound a sandbox's memory per process (the budget divided by its processes) instead "
    "of with a cgroup around the whole sandbox;\n\n"
    "MLFLOW_TRACKING_URI: the MLflow tracking server of mlflow: checkpoint locations and of --log-to mlflow;\n\n"
    "WANDB_PROJECT, WANDB_ENTITY, WANDB_MODE, WANDB_DIR: where --log-to wandb logs, unless the spec's loggers: "
    "section says;\n\n"
    "HF_HOME, HF_HUB_CACHE, HUGGINGFACE_HUB_CACHE: where built-in datasets are looked up in the Hugging Face cache;\n\n"
    "HF_HUB_OFFLINE, HF_DATASETS_OFFLINE, HF_ENDPOINT (and the HTTPS proxy variables): whether, and from where, a "
    "built-in dataset that is not here may be downloaded."
)
"""The documented environment variables (shown by ``evalsi --help``)."""


class _Commands(LazyGroup):
    """The commands, each imported when invoked: ``evalsi run`` does not load the server or the trainers."""

    commands_by_name: ClassVar[dict[str, tuple[str, str]]] = {
        "run": ("evalsi.cli.run", "run_command"),
        "compare": ("evalsi.cli.compare", "compare_command"),
        "view": ("evalsi.cli.view", "view_command"),
        "local-test": ("evalsi.cli.local_test", "local_test_command"),
        "rewards": ("evalsi.cli.rewards", "app"),
        "evaluators": ("evalsi.cli.evaluators", "app"),
        "datasets": ("evalsi.cli.datasets", "app"),
        "jobs": ("evalsi.cli.jobs", "app"),
        "sandbox": ("evalsi.cli.sandbox", "app"),
        "server": ("evalsi.cli.server", "app"),
        "checkpoints": ("evalsi.cli.checkpoints", "app"),
    }


app = typer.Typer(
    name="evalsi",
    cls=_Commands,
    help="evalsi: evaluators as RL rewards, sandboxed code tests and checkpoint evaluation.\n\n"
    "Exit codes: 0 ok, 1 failed work, 2 bad usage or input, 3 a gate or regression failed.\n\n" + ENVIRONMENT,
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"evalsi {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """evalsi: evaluators as RL rewards, sandboxed code tests and checkpoint evaluation."""
    resume_collection()  # the command is loaded by now; a command that never went through the lazy loader too


def main() -> None:
    """Console-script entry point.

    The garbage collector is off while the command's modules load (they allocate tens of thousands of objects that
    live as long as the process, which the collector would scan again and again), and back on, with those objects
    frozen out of its scans, once the command is loaded (:func:`evalsi.cli._lazy.load_command`).
    """
    gc.disable()
    app()
