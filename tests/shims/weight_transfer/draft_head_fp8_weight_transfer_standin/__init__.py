"""Test-only: registers the file weight-transfer engine with vLLM's factory in every vLLM process
(a ``vllm.general_plugins`` entry point, like any plugin), so that ``weight_transfer_config=
{"backend": "dhfp8-files"}`` creates it in each worker. See ../README.md for what it stands for."""

BACKEND = "dhfp8-files"


def register() -> None:
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(
            BACKEND, f"{__name__}.engine", "FileWeightTransferEngine"
        )
