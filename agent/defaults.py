"""Defaults the command line needs before anything heavy is imported (`--help` must not load pydantic)."""

from __future__ import annotations

from pathlib import Path

DEFAULT_CONFIG_PATH = Path("/etc/deepinfer-agent/config.yaml")
