"""Silence third-party log noise that a user of npuc can do nothing about."""

from __future__ import annotations

import logging


def quiet_torchao_import() -> None:
    """torchao registers enums with torch's pytree at import, and torch logs a deprecation
    warning for each (torch 2.14 + torchao 0.18); transformers imports torchao when installed."""
    logging.getLogger("torch.utils._pytree").setLevel(logging.ERROR)
