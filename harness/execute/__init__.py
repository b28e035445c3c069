"""Running a plan: the runner, the local and Ray executors, the worker protocol, process lifelines,
progress.
"""
