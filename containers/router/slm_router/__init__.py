"""One OpenAI-compatible front, two modes: `router` (the SLM classifies each request, answers the easy ones,
escalates the rest to an LLM) and `gateway` (the model farm's entry point, routed by the body's `model`)."""

__version__ = "0.2.0"
