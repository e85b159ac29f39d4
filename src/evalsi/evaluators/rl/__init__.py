"""The rl pack: verifiers for RL rewards.

format-check, math-equiv, code-exec-tests, overlong-penalty, reward-model and group-diversity.
"""
