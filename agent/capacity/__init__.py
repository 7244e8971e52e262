"""What an engine can hold: model shapes, the paper budget and its inputs, the plan, the engine's own figures."""
