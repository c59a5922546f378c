"""dhwt: when input and output embeddings may be tied, and how much of an embedding space the
data fixes rather than the random init. See README.md and DESIGN notes in the repository."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`dhwt.load_run`, imported on first use (the command line starts without torch)."""
    if name == "load_run":
        from dhwt.runs import load_run

        return load_run
    raise AttributeError(f"module 'dhwt' has no attribute {name!r}")
