"""Bailing's two MTP families share a model type (``bailing_hybrid``): which one a config is, is
read as vLLM's config rewrite reads it (V3's by the first architecture, V2.5's by the model type
or its architecture); and their tiny checkpoints load their configuration as real Bailing
checkpoints do, from a module the folder ships (no engine: their engine runs are
tests/test_shared_head_families.py's)."""

from __future__ import annotations

import importlib.util
import json

import pytest
from engine_support import shared_pair

from draft_head_fp8.families import for_config

FAMILIES = ("bailing-v25-mtp", "bailing-v3-mtp")


@pytest.mark.parametrize(
    ("config", "family"),
    [
        ({"model_type": "bailing_hybrid", "architectures": ["BailingMoeV2_5ForCausalLM"]},
         "bailing-v25-mtp"),
        ({"model_type": "bailing_hybrid", "architectures": ["BailingMoeV3ForCausalLM"]},
         "bailing-v3-mtp"),
        # vLLM rewrites any other bailing_hybrid config to V2.5's drafter.
        ({"model_type": "bailing_hybrid", "architectures": ["BailingHybridForCausalLM"]},
         "bailing-v25-mtp"),
        # The drafter's config as vLLM rewrote it, which the plugin reads on the engine.
        ({"model_type": "bailing_hybrid_mtp", "architectures": ["BailingMoeV25MTPModel"]},
         "bailing-v25-mtp"),
        ({"model_type": "bailing_hybrid_v3_mtp", "architectures": ["BailingMoeV3MTPModel"]},
         "bailing-v3-mtp"),
        # The multimodal V3: no record of it is engine-tested here.
        ({"model_type": "bailing_moe_v3_vl",
          "architectures": ["BailingMoeV3VLForConditionalGeneration"]}, None),
    ],
)  # fmt: skip
def test_each_config_is_the_family_vllm_rewrites_it_to(config, family):
    found = for_config({**config, "num_nextn_predict_layers": 1})
    assert (found and found.name) == family


@pytest.mark.parametrize("name", FAMILIES)
def test_the_tiny_config_loads_from_the_module_it_ships(tmp_path_factory, name):
    folder = shared_pair(tmp_path_factory, name).target
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "bailing_hybrid"
    module, _, cls = config["auto_map"]["AutoConfig"].partition(".")
    spec = importlib.util.spec_from_file_location(f"tiny_{module}", folder / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    made = getattr(loaded, cls).from_dict(config)
    assert made.model_type == "bailing_hybrid"
    # Every key vLLM's Bailing classes read, kept as written (no class defaults in their place).
    for key in ("num_experts", "num_shared_experts", "layer_group_size", "head_dim"):
        assert getattr(made, key) == config[key], key
    assert for_config(config, folder).name == name
