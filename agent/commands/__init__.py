"""The CLI's commands beyond the daemon's own (agent/cli.py), one module per family."""
