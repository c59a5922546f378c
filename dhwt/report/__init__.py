"""Figures and Markdown reports built from run directories."""
