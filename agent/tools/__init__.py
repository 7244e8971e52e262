"""Tools run by hand next to the agent: the step-up load test and a SIMULATED vLLM-like engine.

The daemon never imports this package.
"""
