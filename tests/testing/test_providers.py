"""Provider-prefixed model names in completion params: where the endpoint and key come from, in order, and the
errors that say how to configure a provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalsi.testing import EvaluationSetupError
from evalsi.testing._providers import resolve

VARIABLES = (
    "EVALSI_PROVIDERS",
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "FIREWORKS_AI_BASE_URL",
    "FIREWORKS_AI_API_KEY",
    "FIREWORKS_API_KEY",
    "LAB_BASE_URL",
    "LAB_API_KEY",
    "LAB_KEY",
    "HOSTED_VLLM_BASE_URL",
)


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)


def test_a_built_in_provider_needs_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EvaluationSetupError, match=r"set OPENAI_API_KEY \(the API key of provider 'openai'\)"):
        resolve({"model": "openai/gpt-4o-mini"})
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert resolve({"model": "openai/gpt-4o-mini", "temperature": 0}) == {
        "model": "gpt-4o-mini",
        "base_url": "https://api.openai.com/v1",
        "api_key_env": "OPENAI_API_KEY",
        "temperature": 0,
    }
    monkeypatch.setenv("FIREWORKS_API_KEY", "fw")
    fireworks = resolve({"model": "fireworks_ai/accounts/fireworks/models/gpt-oss-120b"})
    assert fireworks["model"] == "accounts/fireworks/models/gpt-oss-120b"  # the rest of the name, slashes and all
    assert fireworks["base_url"] == "https://api.fireworks.ai/inference/v1"


def test_the_environment_pair_comes_first_and_a_local_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert resolve({"model": "openai/qwen"}) == {"model": "qwen", "base_url": "http://127.0.0.1:8000/v1"}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    assert resolve({"model": "openai/qwen"})["api_key_env"] == "OPENAI_API_KEY"
    monkeypatch.setenv("HOSTED_VLLM_BASE_URL", "http://10.0.0.5:8000/v1")  # any name litellm users write
    assert resolve({"model": "hosted_vllm/Qwen/Qwen3-8B"})["model"] == "Qwen/Qwen3-8B"


def test_the_providers_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(
        "providers:\n"
        "  lab: {base_url: 'http://10.0.0.2:8000/v1', api_key_env: LAB_KEY}\n"
        "  fireworks_ai: {base_url: 'http://127.0.0.1:9/v1'}\n"
    )
    monkeypatch.setenv("EVALSI_PROVIDERS", str(path))
    with pytest.raises(EvaluationSetupError, match="set LAB_KEY"):
        resolve({"model": "lab/policy"})
    monkeypatch.setenv("LAB_KEY", "k")
    assert resolve({"model": "lab/policy"}) == {
        "model": "policy",
        "base_url": "http://10.0.0.2:8000/v1",
        "api_key_env": "LAB_KEY",
    }
    monkeypatch.setenv("LAB_API_KEY", "k2")  # <PROVIDER>_API_KEY, when set, wins over the file's variable
    assert resolve({"model": "lab/policy"})["api_key_env"] == "LAB_API_KEY"
    assert resolve({"model": "lab/policy", "api_key_env": "LAB_KEY"})["api_key_env"] == "LAB_KEY"  # the entry's own
    # The file overrides a built-in provider, and the environment overrides the file.
    assert resolve({"model": "fireworks_ai/m"}) == {"model": "m", "base_url": "http://127.0.0.1:9/v1"}
    monkeypatch.setenv("LAB_BASE_URL", "http://127.0.0.1:7/v1")
    assert resolve({"model": "lab/policy"})["base_url"] == "http://127.0.0.1:7/v1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "providers:\n  lab: {base_url: 'ftp://x'}\n",
            "providers.yaml:2: providers.lab.base_url: an http:// or https://",
        ),
        ("providers:\n  lab:\n    base_url: 'http://x'\n    api_key_env: 'sk-abc$'\n", "providers.lab.api_key_env"),
        ("providers:\n  lab: {base_url: 'http://x', headers: {}}\n", "providers.lab: a mapping with `base_url`"),
        ("servers: {}\n", "servers: unknown field"),
        ("providers: [1]\n", "providers: a mapping of provider names"),
        ("providers: {lab: [\n", "invalid YAML"),
    ],
)
def test_a_bad_providers_file_is_named_with_its_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
) -> None:
    path = tmp_path / "providers.yaml"
    path.write_text(text)
    monkeypatch.setenv("EVALSI_PROVIDERS", str(path))
    with pytest.raises(EvaluationSetupError, match=r"providers\.yaml") as raised:
        resolve({"model": "lab/policy"})
    assert message in str(raised.value)


def test_params_with_a_base_url_are_sent_as_written_and_unknown_providers_say_how_to_configure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    params = {"model": "openai/gpt-oss-120b", "base_url": "http://127.0.0.1:8000/v1"}  # a served model's own name
    assert resolve(params) == params
    with pytest.raises(EvaluationSetupError) as raised:
        resolve({"model": "Qwen/Qwen3-8B"}, "completion_params[1]")
    text = str(raised.value)
    assert "completion_params[1].model 'Qwen/Qwen3-8B'" in text and "QWEN_BASE_URL" in text
    assert "EVALSI_PROVIDERS" in text and "openai" in text
    with pytest.raises(EvaluationSetupError, match="give `base_url`, or name the model PROVIDER/NAME"):
        resolve({"model": "gpt-4o-mini"})
    monkeypatch.setenv("EVALSI_PROVIDERS", "/nonexistent/providers.yaml")
    with pytest.raises(EvaluationSetupError, match="no such file"):
        resolve({"model": "lab/x"})
