"""The scenario as written: its schema, sweeps, the user's files, the built-in models and swaps it
may name.
"""
