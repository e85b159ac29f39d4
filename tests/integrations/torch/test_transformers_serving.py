"""``--serve transformers`` for real: a tiny model built and saved here, served in-process on CPU."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from evalsi.training import ServingError, Transformers
from evalsi.training._serving import model_ref

WORDS = ["<eos>", "<unk>", "what", "is", "2+2?", "4", "5", "hello"]


def tiny_model(folder: Path) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    vocab = {w: i for i, w in enumerate(WORDS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    config = GPT2Config(
        vocab_size=len(WORDS), n_positions=64, n_embd=16, n_layer=1, n_head=2, eos_token_id=0, bos_token_id=0
    )
    model = GPT2LMHeadModel(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


def test_serves_a_saved_checkpoint_behind_an_openai_endpoint(tmp_path: Path) -> None:
    folder = tmp_path / "checkpoint-10"
    tiny_model(folder)
    ref = model_ref(folder, 10, "tiny")
    assert ref.files is not None and ref.files.kind == "weights"
    with Transformers().serve(ref) as served:
        assert served.base_url is not None and served.model == ref.served_name
        assert httpx.get(served.base_url.removesuffix("/v1") + "/health").status_code == 200
        reply = httpx.post(
            f"{served.base_url}/completions",
            timeout=60,
            json={"model": served.model, "prompt": "what is 2+2?", "max_tokens": 3, "n": 2},
        )
        assert reply.status_code == 200, reply.text
        choices = reply.json()["choices"]
        assert reply.status_code == 200 and len(choices) == 2
        assert all(set(c["text"].split()) <= set(WORDS) for c in choices)
        chat = httpx.post(
            f"{served.base_url}/chat/completions",
            timeout=60,
            json={"model": served.model, "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}]},
        )
        assert chat.status_code == 200 and isinstance(chat.json()["choices"][0]["message"]["content"], str)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{served.base_url}/models", timeout=2)  # stopped with the block


def test_state_dict_checkpoints_load_into_the_base_architecture(tmp_path: Path) -> None:
    base = tmp_path / "base"
    model = tiny_model(base)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    state = tmp_path / "step-100.pt"
    torch.save({"model": model.state_dict(), "step": 100}, state)
    ref = model_ref(state, 100, "tiny")
    assert ref.files is not None and ref.files.kind == "state-dict"
    with pytest.raises(ServingError, match="give the base model"), Transformers().serve(ref):
        pass
    with Transformers(base_model=str(base)).serve(ref) as served:
        reply = httpx.post(
            f"{served.base_url}/completions",
            timeout=60,
            json={"model": served.model, "prompt": "hello", "max_tokens": 2},
        )
        assert reply.status_code == 200


def test_a_checkpoint_is_evaluated_through_the_run_engine(tmp_path: Path) -> None:
    from evalsi.training import CheckpointEvaluator
    from tests.training.conftest import write_spec

    tiny_model(tmp_path / "out" / "checkpoint-5")
    spec = write_spec(tmp_path / "specs")
    evaluator = CheckpointEvaluator(
        [spec], "tiny", Transformers(), log_dir=tmp_path / "logs", overrides=["numSamples=3", "sampling.maxTokens=2"]
    )
    result = evaluator.evaluate(tmp_path / "out" / "checkpoint-5", 5)
    assert result.complete and result.specs[0].path.exists()
    assert evaluator.is_done(5)


def test_state_dict_serving_loads_the_weights_into_what_the_factory_builds(tmp_path: Path) -> None:
    from evalsi.training import CheckpointEvaluator, PyTorchCheckpointHook, StateDict
    from tests.training.conftest import write_spec

    base = tmp_path / "base"
    trained = tiny_model(base)
    with torch.no_grad():  # the "trained" weights differ from a fresh model's
        for parameter in trained.parameters():
            parameter.mul_(-1.0)
    built: list[GPT2LMHeadModel] = []

    def factory() -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast]:
        model = GPT2LMHeadModel(GPT2Config.from_pretrained(base))
        built.append(model)
        return model, PreTrainedTokenizerFast.from_pretrained(base)

    serving = StateDict(factory)
    evaluator = CheckpointEvaluator(
        write_spec(tmp_path / "specs"),
        "sd",
        serving,
        log_dir=tmp_path / "logs",
        overrides=["numSamples=2", "sampling.maxTokens=2"],
    )
    with PyTorchCheckpointHook(evaluator, wait=True) as hook:
        hook.save(trained, tmp_path / "checkpoints" / "step-7.pt", 7)
    [(step, outcome)] = hook.results
    assert step == 7 and outcome.complete, hook.runner.failures  # type: ignore[attr-defined]
    assert len(built) == 1  # the factory's model was served, with the saved weights in it
    for served, saved in zip(built[0].state_dict().values(), trained.state_dict().values(), strict=True):
        assert torch.equal(served, saved)


def test_state_dict_serving_says_when_the_weights_do_not_fit(tmp_path: Path) -> None:
    from evalsi.training import StateDict

    base = tmp_path / "base"
    tiny_model(base)
    state = tmp_path / "step-1.pt"
    torch.save({"model": {"not.a.weight": torch.zeros(1)}, "step": 1}, state)

    def factory() -> tuple[GPT2LMHeadModel, PreTrainedTokenizerFast]:
        return GPT2LMHeadModel(GPT2Config.from_pretrained(base)), PreTrainedTokenizerFast.from_pretrained(base)

    with (
        pytest.raises(ServingError, match="does not fit the model"),
        StateDict(factory).serve(model_ref(state, 1, "tiny")),
    ):
        pass
