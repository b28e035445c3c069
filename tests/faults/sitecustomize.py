"""Test-only faults, planted in every process of a specbench run from outside the product.

Python imports `sitecustomize` at start-up in every process whose PYTHONPATH holds this folder:
the specbench CLI, its workers, the vLLM server, engine core and TP workers they start (each
passes its environment on). tests.faults.fault_env() puts the folder first on PYTHONPATH and
sets the faults a test asks for. With none of the variables below set this module imports
nothing and changes nothing.

The faults patch product functions when their module is imported (harness.engine.impls and
harness.engine.serve_worker import no vLLM at module level, and nothing imports them before
this runs), so code that imports a name from them gets the patched one too.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # no typing import at every start-up
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from importlib.abc import Loader
    from types import ModuleType
    from typing import Any, TypeAlias

    Patch: TypeAlias = Callable[[ModuleType], None]

# "name:choice:seconds": that implementation choice sleeps this long on every call inside
# vLLM (each call its swap reports; a planted regression for the gate tests).
SLOW_CHOICE_ENV = "SPECBENCH_TEST_FAULT_SLOW_CHOICE"
# Set: the switch between arms answers but changes nothing (a planted wrong path).
NOOP_SWITCH_ENV = "SPECBENCH_TEST_FAULT_NOOP_SWITCH"
# A port (held by the test) the serve worker's first server start binds, to test the retry.
TAKEN_PORT_ENV = "SPECBENCH_TEST_FAULT_TAKEN_PORT"
# "NAME=seconds,...": the stall watchdog's bounds (harness.execute.progress constants such as
# PASS_STALL_FLOOR_S), shrunk so a test sees a stall in seconds.
STALL_BOUNDS_ENV = "SPECBENCH_TEST_FAULT_STALL_BOUNDS"
# "seconds:path": specbench, its launches done, creates the file at path and waits this long
# before it writes the run's outputs (a signal can then land while it writes the results).
SLOW_WRITE_ENV = "SPECBENCH_TEST_FAULT_SLOW_WRITE"
# "Class.caller:method": in vLLM's V1 model runner module, `caller` calls `method` under a new
# name, as a release that renamed a wrap point would (the step timer then wraps a method that
# no step calls).
RENAMED_WRAP_ENV = "SPECBENCH_TEST_FAULT_RENAMED_WRAP"


def slow_choice(spec: str) -> Patch:
    """Wrap the swap context's hit() (called on every call of an installed choice): sleep
    first while the named choice is the active one."""
    name, choice, seconds = spec.split(":")
    delay = float(seconds)

    def patch(impls: ModuleType) -> None:
        import time

        original = impls._Context.hit

        def hit(self: Any, path: str, details: dict[str, Any] | None = None) -> None:
            if self.name == name and impls._active.get(name) == choice:
                time.sleep(delay)
            original(self, path, details)

        impls._Context.hit = hit

    return patch


def noop_switch(_value: str) -> Patch:
    """Wrap switch_epoch(): it still reports and validates, but the active choices stay."""

    def patch(impls: ModuleType) -> None:
        original = impls.switch_epoch

        def switch_epoch(choice: str | None) -> list[dict[str, Any]]:
            active = dict(impls._active)
            try:
                return list(original(choice))
            finally:
                impls._active.clear()
                impls._active.update(active)

        vars(impls)["switch_epoch"] = switch_epoch

    return patch


def taken_port(value: str) -> Patch:
    """The serve worker's first free_port() in this process is the held port."""
    held = [int(value)]

    def patch(serve_worker: ModuleType) -> None:
        original = serve_worker.free_port

        def free_port() -> int:
            return held.pop() if held else int(original())

        vars(serve_worker)["free_port"] = free_port

    return patch


def stall_bounds(spec: str) -> Patch:
    """Set the named bounds of the stall watchdog (each must exist: a typo fails loudly)."""
    bounds = {
        name.strip(): float(value)
        for name, value in (item.split("=") for item in spec.split(",") if item.strip())
    }

    def patch(progress: ModuleType) -> None:
        for name, value in bounds.items():
            if not hasattr(progress, name):
                raise AttributeError(f"{STALL_BOUNDS_ENV}: no bound {name} in {progress}")
            setattr(progress, name, value)

    return patch


def slow_write(spec: str) -> Patch:
    """Wrap the workflow's write_outputs: mark the moment in a file, then wait, then write."""
    seconds, marker = spec.split(":", 1)

    def patch(workflow: ModuleType) -> None:
        import pathlib
        import time

        original = workflow.write_outputs

        def write_outputs(*args: Any, **kwargs: Any) -> Any:
            pathlib.Path(marker).touch()
            time.sleep(float(seconds))
            return original(*args, **kwargs)

        vars(workflow)["write_outputs"] = write_outputs

    return patch


def renamed_wrap(spec: str) -> Patch:
    """Rename, inside `caller`'s code, the attribute `method` it calls, and give the class the
    original under that new name: every step still runs it, never under its old name."""
    qualname, method = spec.split(":")
    owner, caller = qualname.split(".")
    renamed = f"{method}_renamed"

    def patch(module: ModuleType) -> None:
        import inspect

        cls = getattr(module, owner)
        fn = inspect.unwrap(cls.__dict__[caller])  # under its decorators (inference_mode)
        names = tuple(renamed if n == method else n for n in fn.__code__.co_names)
        fn.__code__ = fn.__code__.replace(co_names=names)
        setattr(cls, renamed, cls.__dict__[method])

    return patch


# Environment variable -> (module it patches, the patch for the variable's value).
FAULTS: dict[str, tuple[str, Callable[[str], Patch]]] = {
    SLOW_CHOICE_ENV: ("harness.engine.impls", slow_choice),
    NOOP_SWITCH_ENV: ("harness.engine.impls", noop_switch),
    TAKEN_PORT_ENV: ("harness.engine.serve_worker", taken_port),
    STALL_BOUNDS_ENV: ("harness.execute.progress", stall_bounds),
    SLOW_WRITE_ENV: ("harness.workflow", slow_write),
    RENAMED_WRAP_ENV: ("vllm.v1.worker.gpu_model_runner", renamed_wrap),
}


class _PatchingLoader:
    """A module's own loader, then the patches once the module has run."""

    def __init__(self, loader: Loader, patches: list[Patch]) -> None:
        self._loader = loader
        self._patches = patches

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for patch in self._patches:
            patch(module)

    def __getattr__(self, name: str) -> Any:  # get_code, is_package, ... (runpy uses them)
        return getattr(self._loader, name)


class _PatchOnImport:
    """A sys.meta_path finder: finds the patched modules through the other finders and
    wraps their loaders."""

    def __init__(self, patches: dict[str, list[Patch]]) -> None:
        self.patches = patches

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        patches = self.patches.get(name)
        if patches is None:
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchingLoader(spec.loader, patches)
                return spec
        return None


def install(environ: Mapping[str, str]) -> None:
    """Plant the faults `environ` names: patch now where the module is already imported,
    else when it is."""
    patches: dict[str, list[Patch]] = {}
    for variable, (module, make) in FAULTS.items():
        value = environ.get(variable)
        if value:
            patches.setdefault(module, []).append(make(value))
    for module in list(patches):
        loaded = sys.modules.get(module)
        if loaded is not None:
            for patch in patches.pop(module):
                patch(loaded)
    if patches:
        sys.meta_path.insert(0, _PatchOnImport(patches))


if __name__ == "sitecustomize" and any(os.environ.get(v) for v in FAULTS):
    install(os.environ)
