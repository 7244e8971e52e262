"""The running agent: the loop that wires sources, parsers, sinks and the judge, its signals and sd_notify."""
