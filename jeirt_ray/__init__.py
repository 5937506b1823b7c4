"""jeirt-ray: joint-embedding item response theory (JE-IRT) for LLMs."""

__version__ = "0.1.0"
