"""Each extra, installed alone, does its job: the checks of the ``extras`` nox session, driven from outside.

``python -m tests.extras.check EXTRA --env VENV`` runs EXTRA's own commands with the ``evalsi`` (and ``python``) of
VENV, an environment holding evalsi with that one extra and nothing else. This driver imports no evalsi: it runs
in a separate environment of test tools (``--tools``: moto's S3 server, a GCS JSON-API emulator and an MLflow
tracking server, for the ``remote`` and ``mlflow`` checks), starts stand-ins on loopback for what cannot be
reached here (an OpenAI-compatible model, S3, GCS, the Hugging Face Hub, MLflow) and looks at what the commands
wrote and answered. A check fails with the command's output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tests.helpers.hf_hub_server import HubServer
from tests.helpers.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT = 600.0
"""Seconds one command may take (a shared 2-core machine: generous)."""

QUESTIONS = {"Capital of France?": "Paris", "Capital of Peru?": "Lima", "2+2?": "4"}
"""What the stand-in model is asked (it answers each right) in every run spec below."""


class CheckFailed(AssertionError):
    """A command failed or did not do what its extra promises."""


def expect(condition: object, what: str) -> None:
    """Fail the check with ``what`` unless ``condition``."""
    if not condition:
        raise CheckFailed(what)


class Check:
    """The environment under test, a scratch directory, and the stand-ins the check started."""

    def __init__(self, env: Path, tools: Path | None, work: Path, stack: contextlib.ExitStack) -> None:
        self.env = env
        self.tools = tools
        self.work = work
        self.stack = stack
        self.vars = {k: v for k, v in os.environ.items() if not k.startswith(("EVALSI_", "VIRTUAL_ENV", "PYTHON"))}
        self.vars["PATH"] = os.pathsep.join([str(env / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])  # no other venv
        self.vars["HOME"] = str(work / "home")
        (work / "home").mkdir()

    def bin(self, name: str) -> str:
        """An executable of the environment under test."""
        return str(self.env / "bin" / name)

    def run(self, *args: str, env: dict[str, str] | None = None, code: int = 0) -> subprocess.CompletedProcess[str]:
        """Run a command of the environment in the scratch directory; fail unless it exits with ``code``."""
        done = subprocess.run(
            args, cwd=self.work, env={**self.vars, **(env or {})}, capture_output=True, text=True, timeout=TIMEOUT
        )
        if done.returncode != code:
            raise CheckFailed(
                f"{' '.join(args)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done

    def python(self, code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run Python code with the environment's interpreter."""
        return self.run(self.bin("python"), "-c", textwrap.dedent(code), env=env)

    def model(self) -> OpenAIServer:
        """An OpenAI-compatible stand-in that answers every question of :data:`QUESTIONS` right."""
        return self.stack.enter_context(OpenAIServer(answers=dict(QUESTIONS), default="?"))

    def serve(self, *args: str, url: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Start a long-running command (its own process group, stopped when the check ends); wait for ``url``."""
        log = (self.work / f"{Path(args[0]).name}.log").open("ab")
        process = subprocess.Popen(
            args, cwd=self.work, env={**self.vars, **(env or {})}, stdout=log, stderr=log, start_new_session=True
        )
        self.stack.callback(stop, process)
        wait_http(url, process, Path(log.name))
        return process


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, then SIGKILL after a grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)


def free_port() -> int:
    """A free TCP port on loopback."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_http(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 180.0) -> None:
    """Poll ``url`` until it answers 2xx; fail when the process exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=5) as answer:
            if answer.status < 300:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise CheckFailed(
                f"{process.args!r} did not answer {url} (exit {process.poll()}):\n{log.read_text()[-3000:]}"
            )
        time.sleep(0.25)


def http(url: str, body: Any = None, token: str | None = None) -> tuple[int, bytes]:
    """GET (or POST ``body`` as JSON) ``url``; the status and body, errors included."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {token}"} if token else {})
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def write_yaml(path: Path, document: dict[str, Any]) -> Path:
    """Write a resource (JSON is YAML)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


def exact_match_reward(folder: Path) -> Path:
    """A RewardSpec: exact match of the completion with the reference."""
    spec = {"components": [{"ref": "exact-match", "name": "match"}]}
    return write_yaml(folder / "reward.yaml", {"apiVersion": "evals.si/v1alpha1", "kind": "RewardSpec",
                                               "metadata": {"name": "match"}, "spec": spec})  # fmt: skip


def run_spec(folder: Path, base_url: str, dataset: dict[str, Any] | None = None) -> Path:
    """A RunSpec over :data:`QUESTIONS`, exact-match scored, against ``base_url``."""
    rows = "".join(
        json.dumps({"id": f"q{i}", "prompt": q, "answer": a}) + "\n" for i, (q, a) in enumerate(QUESTIONS.items())
    )
    (folder / "questions.jsonl").write_text(rows)
    spec = {
        "target": {"baseUrl": base_url, "model": "m", "maxRetries": 1, "retryBackoff": 0.01, "timeout": 60},
        "dataset": dataset or {"path": "questions.jsonl"},
        "evaluators": [{"ref": "exact-match"}],
    }
    return write_yaml(folder / "forgetting.yaml", {"apiVersion": "evals.si/v1alpha1", "kind": "RunSpec",
                                                   "metadata": {"name": "forgetting"}, "spec": spec})  # fmt: skip


def exact_match_mean(results: Path) -> float:
    """The exact-match mean of a complete results file."""
    data = json.loads(results.read_text())
    expect(data.get("status") == "complete", f"{results} is not complete: {data.get('status')}")
    return float(data["summary"]["metrics"]["exact-match"]["mean"])


def write_checkpoint(folder: Path) -> Path:
    """A full-weights checkpoint directory (config and a weights file)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"model_type": "standin"}')
    (folder / "model.safetensors").write_bytes(bytes(range(64)))
    return folder


def checkpoint_options(spec: Path, server: OpenAIServer, run: str) -> list[str]:
    """The options of ``evalsi checkpoints`` shared below: an already served model (the stand-in)."""
    return ["-f", str(spec), "--training-run", run, "--serve", "endpoint", "--base-url", server.base_url,
            "--model", "m", "--log-dir", "logs", "-q"]  # fmt: skip


# --- the checks, one per extra -------------------------------------------------------------------------------


def check_math(c: Check) -> None:
    """The quick start and ``scripts/demo``: math rollouts scored, symbolic equivalence included."""
    c.run(c.bin("evalsi"), "rewards", "score", "--spec", str(EXAMPLES / "finetuning/math-reward.yaml"),
          "--data", str(EXAMPLES / "finetuning/math-rollouts.jsonl"), "--output", "demo.jsonl")  # fmt: skip
    rollout = {"prompt": "Half of one?", "completion": "It is \\boxed{\\frac{1}{2}}", "answer": "0.5"}
    (c.work / "half.jsonl").write_text(json.dumps(rollout) + "\n")
    spec = str(EXAMPLES / "finetuning/math-reward.yaml")
    c.run(c.bin("evalsi"), "rewards", "score", "--spec", spec, "--data", "half.jsonl", "--output", "half-out.jsonl")
    [scored] = [json.loads(line) for line in (c.work / "half-out.jsonl").read_text().splitlines()]
    correct = scored["components"]["correct"]
    expect(correct["value"] == 1.0, f"\\frac{{1}}{{2}} is not equivalent to 0.5 without the math extra: {correct}")


def check_parquet(c: Check) -> None:
    """Rollouts in a Parquet file are scored."""
    c.python("""
        import pyarrow as pa, pyarrow.parquet as pq
        rows = [{"prompt": "p1", "completion": "Paris", "answer": "Paris"},
                {"prompt": "p2", "completion": "x", "answer": "Lima"}]
        pq.write_table(pa.Table.from_pylist(rows), "rollouts.parquet")
    """)
    spec = exact_match_reward(c.work)
    c.run(
        c.bin("evalsi"), "rewards", "score", "--spec", str(spec), "--data", "rollouts.parquet", "--output", "out.jsonl"
    )
    totals = [json.loads(line)["total"] for line in (c.work / "out.jsonl").read_text().splitlines()]
    expect(totals == [1.0, 0.0], f"parquet rollouts scored {totals}")


def check_hf(c: Check) -> None:
    """A RunSpec over a Hugging Face dataset (a local dataset folder, offline) runs."""
    server = c.model()
    data = c.work / "hf-dataset"
    data.mkdir()
    rows = "".join(
        json.dumps({"id": f"q{i}", "prompt": q, "answer": a}) + "\n" for i, (q, a) in enumerate(QUESTIONS.items())
    )
    (data / "test.jsonl").write_text(rows)
    spec = run_spec(c.work, server.base_url, {"hf": str(data), "split": "test"})
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(c.work / "hf-home")}
    c.run(c.bin("evalsi"), "run", "-f", str(spec), "-o", "results.json", "-q", env=env)
    expect(exact_match_mean(c.work / "results.json") == 1.0, "the Hugging Face dataset's questions were not all right")


def check_serve(c: Check) -> None:
    """``evalsi rewards serve`` answers OpenRLHF's remote reward protocol."""
    port = free_port()
    spec = exact_match_reward(c.work)
    c.serve(c.bin("evalsi"), "rewards", "serve", "--spec", str(spec), "--port", str(port),
            url=f"http://127.0.0.1:{port}/health")  # fmt: skip
    body = {"query": ["q1 Paris", "q2 Rome"], "prompts": ["q1 ", "q2 "], "labels": ["Paris", "Lima"]}
    status, answer = http(f"http://127.0.0.1:{port}/get_reward", body)
    expect(status == 200 and json.loads(answer)["rewards"] == [1.0, 0.0], f"rewards serve answered {status} {answer!r}")


def check_view(c: Check) -> None:
    """``evalsi view`` serves its pages for a results file."""
    server = c.model()
    c.run(c.bin("evalsi"), "run", "-f", str(run_spec(c.work, server.base_url)), "-o", "results/run.json", "-q")
    port = free_port()
    c.serve(c.bin("evalsi"), "view", "results", "--port", str(port), url=f"http://127.0.0.1:{port}/")
    status, page = http(f"http://127.0.0.1:{port}/")
    expect(status == 200 and b"forgetting" in page, f"the viewer's run list answered {status} without the run")


def check_server(c: Check) -> None:
    """``evalsi server`` starts, answers /healthz and /ui, and scores rewards for a token."""
    port = free_port()
    config = {"listen": {"host": "127.0.0.1", "port": port, "grpcPort": free_port()},
              "database": {"url": f"sqlite:///{c.work / 'server.db'}"}}  # fmt: skip
    path = write_yaml(c.work / "server.yaml", {"apiVersion": "evals.si/v1alpha1", "kind": "ServerConfig",
                                               "metadata": {"name": "check"}, "spec": config})  # fmt: skip
    made = c.run(c.bin("evalsi"), "server", "--config", str(path), "token", "create", "--project", "p",
                 "--permission", "evaluations.run")  # fmt: skip
    token = next(word for word in made.stdout.split() if word.startswith("evalsi_"))
    c.serve(c.bin("evalsi"), "server", "--config", str(path), url=f"http://127.0.0.1:{port}/healthz")
    status, page = http(f"http://127.0.0.1:{port}/ui/login")
    expect(status == 200 and b"<form" in page, f"/ui/login answered {status}")
    spec = {"components": [{"ref": "exact-match", "name": "match"}]}
    rollouts = [{"prompt": "q", "completion": "Paris", "answer": "Paris"}]
    status, answer = http(
        f"http://127.0.0.1:{port}/v1alpha1/rewards:score", {"spec": spec, "rollouts": rollouts}, token
    )
    expect(status == 200 and b'"total":1.0' in answer.replace(b" ", b""), f"rewards:score answered {status} {answer!r}")


def check_trl(c: Check) -> None:
    """TRL reward functions score a batch as GRPOTrainer calls them; ``evalsi_callback`` is a TrainerCallback; a
    checkpoint is served in-process (``--serve transformers``, the default) and evaluated."""
    spec = exact_match_reward(c.work)
    c.python(f"""
        from transformers import TrainerCallback
        from trl import GRPOConfig
        from evalsi.rewards.trl import reward_funcs
        from evalsi.training.callback import evalsi_callback
        funcs, weights = reward_funcs({str(spec)!r})
        totals = funcs[0](prompts=["a", "b"], completions=["Paris", "Rome"], answer=["Paris", "Lima"])
        assert totals == [1.0, 0.0] and weights[0] == 1.0, (totals, weights)
        assert isinstance(evalsi_callback(None, stop_file="STOP"), TrainerCallback)
        assert GRPOConfig.__name__ == "GRPOConfig"

        # a tiny model, served in-process below (`--serve transformers`, the default)
        import torch
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast
        torch.manual_seed(0)
        words = ["<eos>", "<unk>", "Paris", "Lima", "4"]
        core = Tokenizer(models.WordLevel(dict(zip(words, range(len(words)))), unk_token="<unk>"))
        core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
        config = GPT2Config(vocab_size=len(words), n_positions=64, n_embd=16, n_layer=1, n_head=2, eos_token_id=0,
                            bos_token_id=0)
        GPT2LMHeadModel(config).save_pretrained("checkpoint-1")
        tokenizer.save_pretrained("checkpoint-1")
    """)
    server = c.model()  # the spec's target, replaced by the served checkpoint
    run = run_spec(c.work, server.base_url)
    c.run(c.bin("evalsi"), "checkpoints", "eval", "checkpoint-1", "--step", "1", "-f", str(run),
          "--training-run", "trl-run", "--serve", "transformers", "--log-dir", "logs", "-q")  # fmt: skip
    exact_match_mean(c.work / "logs/trl-run/forgetting/step-1.json")  # complete (a random model scores what it may)
    expect(server.request_count() == 0, "the checkpoint was not served in-process: the spec's target was asked")


def check_torch(c: Check) -> None:
    """``PyTorchCheckpointHook`` saves a state dictionary and evaluates it (the model served by the stand-in)."""
    server = c.model()
    spec = run_spec(c.work, server.base_url)
    c.python(f"""
        import torch
        from evalsi.training import CheckpointEvaluator, Endpoint, PyTorchCheckpointHook
        evaluator = CheckpointEvaluator({str(spec)!r}, "torch-run", Endpoint(), log_dir="logs")
        with PyTorchCheckpointHook(evaluator, wait=True, raise_errors=True) as hook:
            hook.save(torch.nn.Linear(2, 2), "checkpoints/step-1.pt", 1)
        saved = torch.load("checkpoints/step-1.pt", weights_only=True)
        assert saved["step"] == 1 and set(saved["model"]) == {{"weight", "bias"}}, saved
    """)
    expect(exact_match_mean(c.work / "logs/torch-run/forgetting/step-1.json") == 1.0, "step 1 was not evaluated")


def check_lightning(c: Check) -> None:
    """``lightning_checkpoint_callback`` in a real Lightning Trainer evaluates each checkpoint it writes."""
    server = c.model()
    spec = run_spec(c.work, server.base_url)
    c.python(f"""
        import pytorch_lightning as pl, torch
        from evalsi.training import CheckpointEvaluator, Endpoint, lightning_checkpoint_callback

        class Tiny(pl.LightningModule):
            def __init__(self):
                super().__init__()
                self.layer = torch.nn.Linear(2, 1)
            def training_step(self, batch, index):
                return self.layer(batch[0]).pow(2).mean()
            def configure_optimizers(self):
                return torch.optim.SGD(self.parameters(), lr=0.1)

        evaluator = CheckpointEvaluator({str(spec)!r}, "lightning-run", Endpoint(), log_dir="logs")
        callback = lightning_checkpoint_callback(evaluator, dirpath="checkpoints", every_n_train_steps=1,
                                                 save_on_train_epoch_end=False, raise_errors=True)
        data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 2)), batch_size=4)
        trainer = pl.Trainer(max_steps=2, callbacks=[callback], logger=False, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu")
        trainer.fit(Tiny(), data)
    """)
    results = sorted((c.work / "logs/lightning-run/forgetting").glob("step-*.json"))
    expect([p.name for p in results] == ["step-1.json", "step-2.json"], f"lightning steps evaluated: {results}")
    expect(all(exact_match_mean(p) == 1.0 for p in results), "a lightning step was not evaluated")


def check_gym(c: Check) -> None:
    """``evalsi/TaskEnv-v0`` is a gymnasium environment: an episode of an example task, solved."""
    task = EXAMPLES / "agent-tasks/write-file/task.yaml"
    c.python(f"""
        import gymnasium
        import evalsi_harness.gym
        env = gymnasium.make("evalsi/TaskEnv-v0", task={str(task)!r})
        try:
            observation, info = env.reset()
            env.step({{"tool": "write_file", "path": "greeting.txt", "content": "hello, world\\n"}})
            observation, reward, terminated, truncated, info = env.step({{"tool": "submit"}})
            assert reward == 1.0 and terminated, (reward, info)
            assert isinstance(env.unwrapped, gymnasium.Env)
        finally:
            env.close()
    """)


def check_images(c: Check) -> None:
    """An agent task's image whose layers are zstd-compressed unpacks: the layer's file is in the root filesystem."""
    c.python(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        from tests.helpers.images import Image, Layer, file, oci_layout, tar_of
        from evalsi_harness import unpack_image
        work = Path({str(c.work)!r})
        work.chmod(0o711)  # the sandbox's user enters the unpacked image: its cache's parents must be traversable
        layer = Layer(tar_of([file("etc/release", "zstd image\\n")]), compression="zstd")
        layout = oci_layout(work / "layout", [Image([layer], tags=["app:1"])])
        rootfs = Path(unpack_image(layout, cache_dir=work / "cache").rootfs)
        assert (rootfs / "etc" / "release").read_text() == "zstd image\\n", sorted(rootfs.rglob("*"))
    """)


def check_plot(c: Check) -> None:
    """``evalsi checkpoints curve --plot curve.png`` draws the learning curve with matplotlib."""
    server = c.model()
    options = checkpoint_options(run_spec(c.work, server.base_url), server, "plot-run")
    c.run(c.bin("evalsi"), "checkpoints", "eval", "base-model", "--step", "base", *options)
    c.run(
        c.bin("evalsi"), "checkpoints", "eval", str(write_checkpoint(c.work / "checkpoint-1")), "--step", "1", *options
    )
    spec = options[1]
    c.run(c.bin("evalsi"), "checkpoints", "curve", "-f", spec, "--training-run", "plot-run", "--log-dir", "logs",
          "--plot", "curve.png")  # fmt: skip
    expect((c.work / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", "curve.png is not a PNG")


def check_tensorboard(c: Check) -> None:
    """``evalsi run --log-to tensorboard`` writes an event file and the per-record table beside the results."""
    server = c.model()
    c.run(c.bin("evalsi"), "run", "-f", str(run_spec(c.work, server.base_url)), "--log-to", "tensorboard", "-q")
    logged = c.work / "evalsi-logs" / "tensorboard"
    events = list(logged.rglob("events.out.tfevents.*"))
    expect(bool(events) and all(e.stat().st_size > 0 for e in events), f"no TensorBoard event file under {logged}")
    expect(bool(list(logged.rglob("*.csv"))), f"no per-record table under {logged}")


def check_wandb(c: Check) -> None:
    """``evalsi run --log-to wandb`` in offline mode writes a W&B run, with no account and no network."""
    server = c.model()
    spec = str(run_spec(c.work, server.base_url))
    c.run(c.bin("evalsi"), "run", "-f", spec, "--log-to", "wandb", "-q",
          env={"WANDB_MODE": "offline", "WANDB_DIR": str(c.work / "wb"), "WANDB_SILENT": "true"})  # fmt: skip
    runs = list((c.work / "wb").rglob("offline-run-*"))
    expect(bool(runs), f"no offline W&B run under {c.work / 'wb'}")
    expect(any(f.suffix == ".wandb" and f.stat().st_size > 0 for r in runs for f in r.iterdir()), "empty W&B run")


def check_remote(c: Check) -> None:
    """``evalsi checkpoints watch`` reads and downloads checkpoints from ``s3://``, ``gs://`` and ``hf://``."""
    expect(c.tools is not None, "the remote check needs --tools (moto, gcp-storage-emulator)")
    assert c.tools is not None
    server = c.model()
    spec = run_spec(c.work, server.base_url)
    local = write_checkpoint(c.work / "hub-repo" / "out" / "checkpoint-1")
    files = {p.name: p.read_bytes() for p in local.iterdir()}
    env: dict[str, str] = {}

    # S3: moto's server, seeded with boto3 (both from the tools environment)
    s3_port = free_port()
    s3_url = f"http://127.0.0.1:{s3_port}"
    c.serve(str(c.tools / "bin/moto_server"), "-H", "127.0.0.1", "-p", str(s3_port), url=f"{s3_url}/moto-api/")
    aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_EC2_METADATA_DISABLED": "true", "AWS_ENDPOINT_URL": s3_url}  # fmt: skip
    env |= aws
    with patched_environ(aws):
        import boto3  # type: ignore[import-not-found,unused-ignore]  # the tools environment's

        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="ckpts")
        for name, data in files.items():
            s3.put_object(Bucket="ckpts", Key=f"run/out/checkpoint-1/{name}", Body=data)

    # GCS: an emulator of the JSON API, seeded with media uploads
    gcs_port = free_port()
    gcs_url = f"http://127.0.0.1:{gcs_port}"
    c.serve(str(c.tools / "bin/gcp-storage-emulator"), "start", "-H", "127.0.0.1", "--port", str(gcs_port),
            "--default-bucket", "ckpts", "--in-memory", url=f"{gcs_url}/storage/v1/b/ckpts")  # fmt: skip
    for name, data in files.items():
        upload = f"{gcs_url}/upload/storage/v1/b/ckpts/o?uploadType=media&name=" + quote(
            f"run/out/checkpoint-1/{name}", safe=""
        )
        request = urllib.request.Request(
            upload, data=data, method="POST", headers={"Content-Type": "application/octet-stream"}
        )
        urllib.request.urlopen(request, timeout=60).close()
    # anonymous (never the machine's credentials or a metadata server); the emulator speaks only the JSON API, so
    # gcsfs's bucket-layout probe over gRPC is turned off
    env |= {"STORAGE_EMULATOR_HOST": gcs_url, "FSSPEC_GCS_TOKEN": "anon", "NO_GCE_CHECK": "true",
            "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}  # fmt: skip

    # the Hugging Face Hub: the stand-in serving the folder as the model repository org/run
    hub = c.stack.enter_context(HubServer({"org/run": c.work / "hub-repo"}))
    env |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(c.work / "hf-home"), "HF_HUB_DISABLE_TELEMETRY": "1"}

    for scheme, url in [("s3", "s3://ckpts/run/out"), ("gs", "gs://ckpts/run/out"), ("hf", "hf://org/run/out")]:
        run = f"remote-{scheme}"
        c.run(c.bin("evalsi"), "checkpoints", "watch", url, "--once", "--settle", "0", "--poll", "0.2",
              *checkpoint_options(spec, server, run), env=env)  # fmt: skip
        expect(
            exact_match_mean(c.work / "logs" / run / "forgetting/step-1.json") == 1.0, f"{url}: step 1 not evaluated"
        )
        [copy] = (c.work / "logs/downloads" / run).glob("checkpoint-1-*")
        got = {p.name: p.read_bytes() for p in copy.iterdir()}
        expect(got == files, f"{url}: downloaded {sorted(got)} differ from the checkpoint's files")


def check_mlflow(c: Check) -> None:
    """``evalsi checkpoints eval mlflow:<model>/<version>`` against a real tracking server (artifacts proxied)."""
    expect(c.tools is not None, "the mlflow check needs --tools (mlflow)")
    assert c.tools is not None
    server = c.model()
    port = free_port()
    uri = f"http://127.0.0.1:{port}"
    c.serve(str(c.tools / "bin/mlflow"), "server", "--host", "127.0.0.1", "--port", str(port),
            "--backend-store-uri", f"sqlite:///{c.work / 'mlflow.db'}", "--serve-artifacts",
            "--artifacts-destination", str(c.work / "artifacts"), "--workers", "1",
            url=f"{uri}/health", env={"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"})  # fmt: skip
    folder = write_checkpoint(c.work / "checkpoint")
    from mlflow import MlflowClient  # the tools environment's

    client = MlflowClient(uri)
    created = client.create_run(experiment_id="0")
    client.log_artifacts(created.info.run_id, str(folder), "checkpoint")
    client.set_terminated(created.info.run_id)
    client.create_registered_model("grpo")
    artifacts = client.get_run(created.info.run_id).info.artifact_uri
    client.create_model_version("grpo", f"{artifacts}/checkpoint", run_id=created.info.run_id, tags={"step": "7"})
    spec = run_spec(c.work, server.base_url)
    options = checkpoint_options(spec, server, "ml")
    tracking = {"MLFLOW_TRACKING_URI": uri}
    c.run(c.bin("evalsi"), "checkpoints", "eval", "mlflow:grpo/1", "--step", "7", *options, env=tracking)
    expect(exact_match_mean(c.work / "logs/ml/forgetting/step-7.json") == 1.0, "mlflow:grpo/1 was not evaluated")


def check_ray(c: Check) -> None:
    """Rollouts scored on Ray Data and a run's generations scored by a reward pool, each on a new local Ray."""
    rows = [{"prompt": q, "completion": a if i else "?", "answer": a} for i, (q, a) in enumerate(QUESTIONS.items())]
    (c.work / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = exact_match_reward(c.work)
    c.run(c.bin("evalsi"), "rewards", "score", "--spec", str(spec), "--data", "rollouts.jsonl",
          "--output", "out.jsonl", "--ray", "local", "--ray-workers", "1", "-q")  # fmt: skip
    totals = [json.loads(line)["total"] for line in (c.work / "out.jsonl").read_text().splitlines()]
    expect(totals == [0.0, 1.0, 1.0], f"rollouts scored on Ray Data: {totals}")
    run = run_spec(c.work, c.model().base_url)
    c.run(c.bin("evalsi"), "run", "-f", str(run), "-o", "run.json", "--ray", "local", "--ray-workers", "1", "-q")
    mean = exact_match_mean(c.work / "run.json")
    expect(mean == 1.0, f"a run scored by a reward pool has exact-match mean {mean}")


def check_dev(c: Check) -> None:
    """The development tools the dev extra brings run."""
    for tool in ["pytest", "ruff", "mypy", "nox", "pre-commit", "lint-imports"]:
        c.run(c.bin(tool), "--help")
    c.python("import hypothesis, xdist, pytest_timeout, grpc_tools, gymnasium, yaml, jsonschema")


CHECKS: dict[str, Callable[[Check], None]] = {
    name.removeprefix("check_"): fn for name, fn in globals().items() if name.startswith("check_") and callable(fn)
}


@contextlib.contextmanager
def patched_environ(values: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``values`` set, for the tools' own clients in this process."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main(argv: list[str] | None = None) -> int:
    """Run one extra's check; exit 0 when it passed, 1 with the reason otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("extra", choices=sorted(CHECKS))
    parser.add_argument("--env", type=Path, required=True, help="the environment holding evalsi[EXTRA] alone")
    parser.add_argument("--tools", type=Path, help="the environment of test tools (remote, mlflow)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f"evalsi-extra-{args.extra}-"))
    try:
        with contextlib.ExitStack() as stack:
            tools = args.tools.resolve() if args.tools else None
            CHECKS[args.extra](Check(args.env.resolve(), tools, work, stack))
    except CheckFailed as exc:
        print(f"evalsi[{args.extra}]: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"evalsi[{args.extra}]: ok ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
