"""Running the engine for a run. Kept free of Django imports at package level: engine_child imports it."""
