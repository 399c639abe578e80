"""What the device-path tests run `tools.tiny_models.random_pair` (a two-layer random
target and a random EAGLE head) on: the policies' settings and the prompts."""

from sglang_cast.cast import CostModel, PolicySettings, TreeShape

SETTINGS = PolicySettings.single(CostModel.linear(1.0, 4.0, draft_ratio=0.2), shape=TreeShape(4, 3, 10))
PROMPTS = ["hello world", "trees", "speculative decoding on a device"]
