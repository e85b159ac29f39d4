"""The judge pack: ``llm-judge``, a generative judge through any OpenAI-compatible endpoint.

Importing this package registers ``llm-judge``. :class:`JudgeConfig` is what a component's ``judge`` holds
in-process; on the evalsi server, a judge's name is replaced by the judge the server configures.
"""

from evalsi._util.public import publish
from evalsi.evaluators.judge._config import (
    JsonVerdict,
    JudgeConfig,
    LabelVerdict,
    NumberVerdict,
)
from evalsi.evaluators.judge._evaluator import LLMJudge, LLMJudgeParams

__all__ = [
    "JsonVerdict",
    "JudgeConfig",
    "LLMJudge",
    "LLMJudgeParams",
    "LabelVerdict",
    "NumberVerdict",
]

publish(__name__)
