"""`python -m agent` runs the same CLI as the `deepinfer-agent` console script."""

from agent.cli import app

app(prog_name="deepinfer-agent")
