"""Checks that each extra, installed alone, does its job (run by the `extras` nox session)."""
