"""sim: a discrete-event simulator of LLM serving engines."""

__version__ = "0.1.0"
