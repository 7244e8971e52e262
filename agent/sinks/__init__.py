"""Where records go: SQLite (the write side and the read-only queries) and the Prometheus exporter."""
