"""Scripted policies for the example tasks: for each, actions that solve it and actions that do not.

They are what a model would write, fixed in advance, so the tasks and their checkers can be tried (and tested)
without a model: a task whose solving policy does not earn 1, or whose failing policy does, is a broken task.
"""

from __future__ import annotations

SOLVING: dict[str, list[object]] = {
    "write-file": [
        {"tool": "bash", "command": "ls -la"},
        {"tool": "write_file", "path": "greeting.txt", "content": "hello, world\n"},
        {"tool": "read_file", "path": "greeting.txt"},
        {"tool": "submit"},
    ],
    "fix-failing-test": [
        {"tool": "bash", "command": "python3 -m unittest -q test_stats"},
        {"tool": "read_file", "path": "stats.py"},
        {"tool": "bash", "command": "sed -i 's|/ (len(values) + 1)|/ len(values)|' stats.py && git diff --stat"},
        {"tool": "bash", "command": "python3 -m unittest -q test_stats"},
        {"tool": "submit"},
    ],
    "shell-sort-logs": [
        {"tool": "bash", "command": "mkdir -p errors && grep -l ERROR logs/*.log | xargs -r mv -t errors/"},
        {"tool": "bash", "command": "ls errors logs"},
        {"tool": "submit"},
    ],
}
"""Actions that solve each task (reward 1)."""

FAILING: dict[str, list[object]] = {
    # the right words, the wrong content
    "write-file": [{"tool": "write_file", "path": "greeting.txt", "content": "Hello World\n"}, {"tool": "submit"}],
    # makes the visible test pass by editing the test: the hidden tests still fail
    "fix-failing-test": [
        {"tool": "bash", "command": "sed -i 's|mean(\\[2, 4, 6\\]), 4|mean([2, 4, 6]), 3|' test_stats.py"},
        {"tool": "bash", "command": "python3 -m unittest -q test_stats"},
        {"tool": "submit"},
    ],
    # moves every log, not only the ones with errors
    "shell-sort-logs": [{"tool": "bash", "command": "mkdir -p errors && mv logs/*.log errors/"}, {"tool": "submit"}],
}
"""Actions that do not solve each task (reward below 1)."""
