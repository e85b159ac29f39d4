"""Drive an agent task with a scripted policy or any OpenAI-compatible model, and print how the episode went.

    python examples/agent-tasks/run_agent.py examples/agent-tasks/write-file/task.yaml --scripted solving
    python examples/agent-tasks/run_agent.py examples/agent-tasks/write-file/task.yaml \
        --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B

Exit status: 0 when the checker passed (reward 1), 1 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from evalsi_harness import Episode, OpenAIPolicy, Policy, ScriptedPolicy, TaskEnv, run_episode

sys.path.insert(0, str(Path(__file__).parent))
from policies import FAILING, SOLVING


def main(argv: list[str] | None = None) -> int:
    """Run one episode; the exit status says whether the checker passed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("task", help="a Task YAML file")
    parser.add_argument("--scripted", choices=["solving", "failing"], help="play the example's scripted policy")
    parser.add_argument("--base-url", help="an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1")
    parser.add_argument("--model", default="default", help="the model name to ask for")
    parser.add_argument("--no-tools", action="store_true", help="the model answers with JSON actions as text")
    args = parser.parse_args(argv)
    task = Path(args.task)
    if args.scripted:
        scripts = SOLVING if args.scripted == "solving" else FAILING
        if task.parent.name not in scripts:
            parser.error(f"no scripted policy for {task.parent.name!r} (known: {', '.join(scripts)})")
        policy: Policy = ScriptedPolicy(scripts[task.parent.name])
    elif args.base_url:
        policy = OpenAIPolicy(
            args.base_url, args.model, api_key=os.environ.get("OPENAI_API_KEY"), use_tools=not args.no_tools
        )
    else:
        parser.error("give --scripted solving|failing or --base-url")
    with TaskEnv(task) as env:
        episode = run_episode(env, policy)
    report(episode)
    return 0 if episode.reward == 1.0 else 1


def report(episode: Episode) -> None:
    """Print the chat, one line a message, then the reward and the checker's reason."""
    for message in episode.messages[1:]:
        text = message.get("content") or json.dumps(message.get("tool_calls"))
        print(f"[{message['role']}] {text.strip()[:300]}")
    checker = episode.info.get("checker", {})
    print(f"reward: {episode.reward}  steps: {episode.steps}  checker: {checker.get('reason', '')}")


if __name__ == "__main__":
    sys.exit(main())
