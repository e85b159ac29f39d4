"""Uploaded evaluators: archives checked and indexed, built in the sandbox, run by resident workers."""
