"""`python -m agent` runs the same CLI as the `deepinfer-agent` console script."""

import sys

from agent.launch import guarded

sys.exit(guarded("deepinfer-agent"))
