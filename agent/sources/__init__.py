"""Where lines and samples come from: files, journald, NVML, the engines' /metrics. Nothing here parses meaning."""
