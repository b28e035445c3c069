"""The stand-in cpu backend's compiler: Triton's interpreter runs every kernel on CPU tensors
(TRITON_INTERPRET=1), so nothing is ever compiled and these methods are never reached for a
real compile; they exist because Triton requires one concrete BaseBackend per backend."""

from triton.backends.compiler import BaseBackend, GPUTarget


class InterpreterOnlyBackend(BaseBackend):
    @staticmethod
    def supports_target(target: GPUTarget) -> bool:
        return target.backend == "cpu"

    def hash(self) -> str:
        return "specbench-interpreter-only-cpu"

    def parse_options(self, options: dict) -> object:
        return options

    def add_stages(self, stages: dict, options: object, language: object) -> None:
        raise RuntimeError(
            "specbench's stand-in cpu backend compiles nothing: run with "
            "TRITON_INTERPRET=1 (Triton's interpreter)"
        )

    def load_dialects(self, context: object) -> None:
        return None

    def get_module_map(self) -> dict:
        return {}
