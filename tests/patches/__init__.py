"""Patch functions a test variant installs by import path (variants.NAME.patch)."""
