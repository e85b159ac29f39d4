"""Integration tests that need PyTorch Lightning run in their own nox session, which sets
``EVALSI_INTEGRATION``; the core suite (no torch) does not collect them."""

from __future__ import annotations

import os

if not os.environ.get("EVALSI_INTEGRATION"):
    collect_ignore_glob = ["*"]
