"""Leaf helpers with no evalsi imports."""
