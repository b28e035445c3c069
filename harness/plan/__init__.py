"""From a scenario to the launches that will run: the plan, overlays, builds, pre-flight checks,
block schedule.
"""
