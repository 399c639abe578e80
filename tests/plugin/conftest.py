"""Fixtures of the plugin tests: a two-bucket profile file and an EAGLE-3 head
directory (a config.json naming the architecture, no weights)."""

import json
from pathlib import Path

import pytest

from sglang_cast.cast import Thresholds
from sglang_cast.profile import Profile, save_profile
from support.plugin import two_bucket_settings


@pytest.fixture
def profile_path(tmp_path) -> Path:
    profile = Profile(label="h100", device="NVIDIA H100 80GB HBM3", source="analytic",
                      settings=two_bucket_settings(Thresholds(1.0, 1.0, 1.0)))
    return save_profile(profile, tmp_path / "h100.yaml")


@pytest.fixture
def eagle3_head(tmp_path) -> Path:
    head = tmp_path / "eagle3-head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLMEagle3"]}))
    return head
