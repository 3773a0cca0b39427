"""diptych.sim.serving: a discrete-event simulation of an LLM serving engine (docs/serving.md)."""
