"""The bottom layer: the data that crosses processes and the disk (records, the worker
protocol, plan and run types, overlay specs, the manifest). It imports only config and the
base modules (errors, atomic, env); everything else may import it."""
