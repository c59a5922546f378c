"""Theorems of proofs/ as executable checks (symbolic, numeric, empirical)."""
