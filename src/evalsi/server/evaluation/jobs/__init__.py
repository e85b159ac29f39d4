"""Evaluation jobs: a dataset's completions generated against a target, scored, budgeted, their output kept."""
