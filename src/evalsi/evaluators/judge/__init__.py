"""The judge pack: generative judges through any OpenAI-compatible endpoint.

``llm-judge`` scores each rollout by a rubric; ``pairwise-judge`` compares the completions of a prompt two at a
time and scores each rollout by its win rate. Importing this package registers both.
:class:`JudgeConfig` is what a component's ``judge`` holds in-process; on the evalsi
server, a judge's name is replaced by the judge the server configures.
"""

from evalsi._util.public import publish
from evalsi.evaluators.judge._config import (
    JsonVerdict,
    JudgeConfig,
    LabelVerdict,
    NumberVerdict,
)
from evalsi.evaluators.judge._evaluator import LLMJudge, LLMJudgeParams
from evalsi.evaluators.judge._pairwise import PairwiseJudge, PairwiseJudgeParams

__all__ = [
    "JsonVerdict",
    "JudgeConfig",
    "LLMJudge",
    "LLMJudgeParams",
    "LabelVerdict",
    "NumberVerdict",
    "PairwiseJudge",
    "PairwiseJudgeParams",
]

publish(__name__)
