"""deepinfer-agent: watches GPU inference nodes and sizes their KV-cache budget."""

__version__ = "0.1.0"
