"""``evalsi jobs create|get|wait|cancel``: evaluation jobs on an evalsi server.

``wait`` polls until the job ends: exit 0 when COMPLETED, 1 when FAILED or CANCELLED (or the wait timed out).
"""

from __future__ import annotations

import time

import typer

from evalsi.cli._console import EXIT_FAILED, fail
from evalsi.cli._remote import SERVER_HELP, call, show

app = typer.Typer(help="Create, follow and cancel evaluation jobs on an evalsi server.", no_args_is_help=True)
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


@app.command("create")
def create_command(
    evaluator: str = typer.Option(..., "--evaluator", help="An ACTIVE evaluator's id."),
    input_dataset: str = typer.Option(..., "--input-dataset", help="The dataset to score."),
    output_dataset: str = typer.Option(..., "--output-dataset", help="The dataset the job creates (must be new)."),
    job_id: str | None = typer.Option(None, "--id", help="The job's id (default: generated)."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
) -> None:
    """Start an evaluation job: score every row of the input dataset with the evaluator, in the sandbox."""
    job = {"evaluator": evaluator, "inputDataset": input_dataset, "outputDataset": output_dataset}
    body = {"evaluationJob": job, "evaluationJobId": job_id or ""}
    show(call(server, "POST", "/v1alpha1/evaluationJobs", body))


@app.command("get")
def get_command(
    job_id: str = typer.Argument(..., help="The job's id."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
) -> None:
    """Show a job: its state and, once completed, its metrics and output stats."""
    show(call(server, "GET", f"/v1alpha1/evaluationJobs/{job_id}"))


@app.command("wait")
def wait_command(
    job_id: str = typer.Argument(..., help="The job's id."),
    timeout: float = typer.Option(3600.0, "--timeout", help="Give up after this many seconds (exit 1)."),
    interval: float = typer.Option(2.0, "--interval", min=0.1, help="Seconds between polls."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
) -> None:
    """Wait until the job ends; exit 0 when COMPLETED, 1 when FAILED or CANCELLED."""
    deadline = time.monotonic() + timeout
    job = call(server, "GET", f"/v1alpha1/evaluationJobs/{job_id}")
    while job.get("state") not in TERMINAL:
        if time.monotonic() >= deadline:
            show(job)
            fail(f"job {job_id} is still {job.get('state')} after {timeout:g}s", EXIT_FAILED)
        time.sleep(interval)
        job = call(server, "GET", f"/v1alpha1/evaluationJobs/{job_id}")
    show(job)
    if job["state"] != "COMPLETED":
        fail(f"job {job_id} ended {job['state']}: {job.get('message', '')}", EXIT_FAILED)


@app.command("cancel")
def cancel_command(
    job_id: str = typer.Argument(..., help="The job's id."),
    server: str | None = typer.Option(None, "--server", help=SERVER_HELP),
) -> None:
    """Cancel a queued or running job (its sandbox processes are killed)."""
    show(call(server, "POST", f"/v1alpha1/evaluationJobs/{job_id}/cancel"))
