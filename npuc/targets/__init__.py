"""Targets: NPU descriptions as data (TOML presets) and the validating loader."""

from __future__ import annotations

from npuc.targets.loader import (
    DEFAULT_TARGET,
    list_presets,
    load_target,
    target_from_dict,
    target_from_toml,
    targets_table,
)
from npuc.targets.target import Target

__all__ = [
    "DEFAULT_TARGET",
    "Target",
    "list_presets",
    "load_target",
    "target_from_dict",
    "target_from_toml",
    "targets_table",
]
