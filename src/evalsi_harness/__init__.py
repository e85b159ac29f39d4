"""Agent tasks as RL environments: a task (image, setup, checker) run as reset/step episodes in the sandbox.

:class:`~evalsi_harness.gym.TaskEnv` is one environment; :class:`TaskEnvPool` many of one task at once;
:func:`tool_schemas` gives the actions as OpenAI tools; :func:`run_episode` drives an environment with a policy
(scripted, or any OpenAI-compatible model).
"""

from evalsi_harness._actions import TOOL_NAMES, Action, ActionError, parse_action, tool_schemas
from evalsi_harness._agent import Episode, OpenAIPolicy, Policy, ScriptedPolicy, run_episode
from evalsi_harness._checker import CheckResult, run_checker
from evalsi_harness._environment import Environment, Snapshot, TaskSetupError
from evalsi_harness._image import UnpackedImage, image_cache_dir, unpack_image
from evalsi_harness._pool import TaskEnvPool
from evalsi_harness._task import CheckFn, CommandChecker, Setup, Task, load_task, task_from_spec
from evalsi_harness._unpack import ImageError
from evalsi_harness.gym import TaskEnv, TaskEnvError

__all__ = [
    "TOOL_NAMES",
    "Action",
    "ActionError",
    "CheckFn",
    "CheckResult",
    "CommandChecker",
    "Environment",
    "Episode",
    "ImageError",
    "OpenAIPolicy",
    "Policy",
    "ScriptedPolicy",
    "Setup",
    "Snapshot",
    "Task",
    "TaskEnv",
    "TaskEnvError",
    "TaskEnvPool",
    "TaskSetupError",
    "UnpackedImage",
    "image_cache_dir",
    "load_task",
    "parse_action",
    "run_checker",
    "run_episode",
    "task_from_spec",
    "tool_schemas",
    "unpack_image",
]
