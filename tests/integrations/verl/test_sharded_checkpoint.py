"""A verl FSDP actor checkpoint written by verl's own checkpoint manager (CPU, gloo), converted once by verl's model
merger into a Hugging Face folder, and served."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from evalsi.training import Transformers, discover
from evalsi.training._checkpoints import find_model
from evalsi.training._serving import model_ref
from evalsi.training._vllm import free_port

HERE = Path(__file__).resolve().parent
WORDS = ["<eos>", "<unk>", "what", "is", "2+2?", "4", "5", "hello"]


def tiny_qwen2(folder: Path, tokenizer_folder: Path) -> None:
    """A one-layer Qwen2 (verl's merger rebuilds ``*ForCausalLM`` architectures) and a word-level tokenizer.

    The tokenizer is also saved on its own: transformers loads a ``qwen2`` folder's tokenizer as Qwen2's BPE one.
    """
    torch.manual_seed(0)
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<eos>", unk_token="<unk>")
    config = Qwen2Config(
        vocab_size=len(WORDS), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64, eos_token_id=0, bos_token_id=0, tie_word_embeddings=False,
    )  # fmt: skip
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    tokenizer.save_pretrained(tokenizer_folder)


def test_a_verl_fsdp_actor_is_merged_once_by_verls_model_merger_and_served(tmp_path: Path) -> None:
    base, words = tmp_path / "base", tmp_path / "words"
    tiny_qwen2(base, words)
    step = tmp_path / "out" / "global_step_4"
    writer = [sys.executable, str(HERE / "write_fsdp_checkpoint.py"), str(base), str(step), str(free_port())]
    written = subprocess.run(writer, capture_output=True, text=True, timeout=600, check=False)
    assert written.returncode == 0, written.stderr[-3000:]
    assert (step / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert not (step / "actor" / "huggingface" / "model.safetensors").exists()  # only the shards hold weights
    assert [c.step for c in discover(tmp_path / "out")] == [4]
    found = find_model(step)
    assert found is not None and found.sharded is not None and found.sharded.format == "verl-fsdp"

    ref = model_ref(step, 4, "verl run", convert_dir=tmp_path / "converted")
    assert ref.files is not None and ref.files.kind == "weights" and ref.files.sharded is None
    assert ref.files.path.parent == tmp_path / "converted" / "verl-run"
    merged = AutoModelForCausalLM.from_pretrained(ref.files.path).state_dict()
    reference = torch.load(tmp_path / "out" / "reference.pt", weights_only=True)
    assert set(reference) <= set(merged)
    assert all(torch.equal(merged[k], v.to(merged[k].dtype)) for k, v in reference.items())  # verl saves bf16
    weights = ref.files.path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    again = model_ref(step, 4, "verl run", convert_dir=tmp_path / "converted")
    assert again.files == ref.files and weights.stat().st_mtime_ns == stamp  # reused: merged once
    with Transformers(tokenizer=str(words)).serve(ref) as served:
        assert served.base_url is not None
        reply = httpx.post(
            f"{served.base_url}/completions",
            timeout=60,
            json={"model": ref.served_name, "prompt": "what is 2+2?", "max_tokens": 2},
        )
        assert reply.status_code == 200, reply.text
