"""dhwt: when input and output embeddings may be tied, and how much of an embedding space the
data fixes rather than the random init. See README.md and DESIGN notes in the repository."""

__version__ = "0.1.0"
