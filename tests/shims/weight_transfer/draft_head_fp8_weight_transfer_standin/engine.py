"""A weight-transfer engine that receives tensors from a safetensors file on each worker's disk and
hands them to vLLM's own checkpoint-format update path: vLLM's layerwise reload begun at
``start_weight_update``, the model's own ``load_weights`` for each chunk, the reload finished at
``finish_weight_update`` (what vLLM's IPC and NCCL checkpoint-format engines do once the tensors
have arrived). Only the transport is stood in for."""

from __future__ import annotations

from dataclasses import dataclass, field

from safetensors.torch import load_file
from vllm.distributed.weight_transfer.base import (
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)


def _reload_steps():
    """vLLM's begin and end of a checkpoint-format update: named start_reload/finish_reload
    from 0.34, initialize_/finalize_layerwise_reload before."""
    from vllm.model_executor.model_loader import reload

    if hasattr(reload, "start_reload"):
        return (
            lambda engine: reload.start_reload(engine.model),
            lambda engine: reload.finish_reload(engine.model, engine.model_config, engine.device),
        )
    return (
        lambda engine: reload.initialize_layerwise_reload(engine.model),
        lambda engine: reload.finalize_layerwise_reload(engine.model, engine.model_config),
    )


@dataclass
class FileInitInfo(WeightTransferInitInfo):
    pass


@dataclass
class FileUpdateInfo(WeightTransferUpdateInfo):
    path: str = ""  # a safetensors file: checkpoint names -> tensors
    names: list[str] = field(default_factory=list)  # those to send; empty: all


class FileWeightTransferEngine(WeightTransferEngine[FileInitInfo, FileUpdateInfo]):
    init_info_cls = FileInitInfo
    update_info_cls = FileUpdateInfo

    def init_transfer_engine(self, init_info: FileInitInfo) -> None:
        pass  # no rendezvous: every worker reads the same file

    def start_weight_update(self) -> None:
        _reload_steps()[0](self)

    def finish_weight_update(self) -> None:
        _reload_steps()[1](self)

    def receive_weights(self, update_info: FileUpdateInfo) -> None:
        tensors = load_file(update_info.path)
        names = update_info.names or sorted(tensors)
        self.model.load_weights([(name, tensors[name]) for name in names])

    def shutdown(self) -> None:
        pass
