"""Evaluators: the `Evaluator` base class, `Score`, and the registry of built-in and installed packs."""

from evalsi._util.public import publish
from evalsi.evaluators._base import Evaluator, NoParams, Params, ScoreContext
from evalsi.evaluators._group import GroupEvaluator, GroupParams
from evalsi.evaluators._operator import (
    OPERATOR_ONLY,
    ServerResource,
    has_operator_fields,
    is_operator_only,
    operator_fields_set,
)
from evalsi.evaluators._paths import SPEC_PATH, resolve_spec_paths, spec_path_params
from evalsi.evaluators._patterns import use_python_regex
from evalsi.evaluators._registry import (
    ENTRY_POINT_GROUP,
    PluginValidationError,
    all_evaluators,
    available_names,
    close_all,
    evaluator_class,
    get_evaluator,
    register,
)
from evalsi.evaluators._score import STATUSES, Score, Status

__all__ = [
    "ENTRY_POINT_GROUP",
    "OPERATOR_ONLY",
    "SPEC_PATH",
    "STATUSES",
    "Evaluator",
    "GroupEvaluator",
    "GroupParams",
    "NoParams",
    "Params",
    "PluginValidationError",
    "Score",
    "ScoreContext",
    "ServerResource",
    "Status",
    "all_evaluators",
    "available_names",
    "close_all",
    "evaluator_class",
    "get_evaluator",
    "has_operator_fields",
    "is_operator_only",
    "operator_fields_set",
    "register",
    "resolve_spec_paths",
    "spec_path_params",
    "use_python_regex",
]

publish(__name__)
