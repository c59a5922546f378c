"""`python -m dhwt` (used by torchrun launches) runs the same CLI as the `dhwt` script."""

from dhwt.cli import main

main()
