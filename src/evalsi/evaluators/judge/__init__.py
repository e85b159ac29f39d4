"""The judge pack: ``llm-judge``, a generative judge through any OpenAI-compatible endpoint.

Importing this package registers ``llm-judge``. :class:`JudgeConfig` is what a component's ``judge`` holds
in-process; a server that configures judges by name installs a resolver with :func:`set_judge_resolver`.
"""

from evalsi.evaluators.judge._config import (
    JsonVerdict,
    JudgeConfig,
    JudgeResolver,
    LabelVerdict,
    NumberVerdict,
    set_judge_resolver,
)
from evalsi.evaluators.judge._evaluator import LLMJudge, LLMJudgeParams

__all__ = [
    "JsonVerdict",
    "JudgeConfig",
    "JudgeResolver",
    "LLMJudge",
    "LLMJudgeParams",
    "LabelVerdict",
    "NumberVerdict",
    "set_judge_resolver",
]
