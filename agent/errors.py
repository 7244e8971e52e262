"""The exceptions the core raises; only `agent.cli` turns them into text and exit codes.

Every error names what was wrong and what was expected, so the CLI can print it as is.
"""

from __future__ import annotations


class AgentError(Exception):
    """Base of every error the agent raises on purpose (anything else is a bug)."""


class ConfigError(AgentError):
    """A config file is unreadable or invalid; `problems` lists every problem found, not just the first."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(problems))


class ModelError(AgentError):
    """A model could not be described: unknown preset, malformed config.json, unsupported architecture."""


class BudgetError(AgentError):
    """The inputs describe a deployment that cannot hold any KV cache (or are out of range)."""


class SourceError(AgentError):
    """A log source cannot be set up at all (bad glob, journalctl missing); runtime read errors are counted."""


class StoreError(AgentError):
    """The SQLite store cannot be opened, migrated or written; names the database file."""


class StoreVersionError(StoreError):
    """The store was written by a newer agent (migrations this one does not know): no retry can help, so the
    daemon stops with this instead of buffering for ever, and readers refuse it."""
