"""The stand-in cpu backend's driver: active on a machine without a GPU, targeting "cpu", with
torch's CPU device. Triton's interpreter (TRITON_INTERPRET=1) launches the kernels itself."""

import time

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase


def _bench(fn, *args, **kwargs):
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000.0


class InterpreterOnlyDriver(DriverBase):
    def __init__(self) -> None:
        pass

    @classmethod
    def is_active(cls) -> bool:
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        return ty

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cpu", 0, 0)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        return _bench

    def get_device_interface(self):
        import torch

        return torch.cpu

    def get_current_device(self) -> int:
        return 0

    def set_current_device(self, device: int) -> None:
        return None

    def get_current_stream(self, device: int | None = None) -> int:
        return 0
