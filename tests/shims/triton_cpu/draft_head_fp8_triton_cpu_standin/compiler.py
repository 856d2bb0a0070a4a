"""The one concrete ``BaseBackend`` Triton's backend discovery requires: it claims the ``cpu``
target and refuses to compile."""

from triton.backends.compiler import BaseBackend, GPUTarget

from draft_head_fp8_triton_cpu_standin import SHIM, refuse


class CPUStandInBackend(BaseBackend):
    @staticmethod
    def supports_target(target: GPUTarget) -> bool:
        return target.backend == "cpu"

    def hash(self) -> str:
        return SHIM

    def parse_options(self, options: dict) -> object:
        raise refuse("parse compile options")

    def add_stages(self, stages: dict, options: object, language: object) -> None:
        raise refuse("compile a kernel")

    def load_dialects(self, context: object) -> None:
        raise refuse("load MLIR dialects")

    def get_module_map(self) -> dict:
        raise refuse("map device modules")
