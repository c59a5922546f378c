"""Built-in grammar specs (TOML). A package only so that the specs ship inside the wheel."""
