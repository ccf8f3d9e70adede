"""STAND-IN for SGLang (imagekit local rehearsal): only the CLI surface the probes touch."""

__version__ = "0.0.0+standin"
STANDIN = True
