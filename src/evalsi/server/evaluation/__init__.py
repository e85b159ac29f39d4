"""Evaluation on the server: a project's uploaded evaluators, its datasets and its evaluation jobs.

The sections of the server config they read, their tables, ids and pages are here; the evaluators (built in the
sandbox, run by resident workers) and the jobs (generation, scoring, output) are subpackages.
"""
