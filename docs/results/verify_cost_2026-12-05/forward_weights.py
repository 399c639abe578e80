"""A forward's worth of random packed weights in the embedded model's shapes: 30 layers of four int4vnni
linears (q/k/v stacked, o, gate/up stacked, down: 53 MB) and the int8vnni LM head (28 MB)."""
import torch

from sglang_cast.models.vnni_dot import VnniInt4, VnniInt8

SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # (outputs, inputs) of one layer's linears


def forward_weights(g: torch.Generator) -> tuple[list[list[torch.Tensor]], VnniInt8]:
    """``layers[l][i]``: the packed blocks of layer l's linear i (`SHAPES`); the packed LM head."""
    def w4(n, k):
        return VnniInt4.pack(torch.randint(0, 16, (n, k), generator=g), torch.rand(n, k // 32, generator=g) * 0.01,
                             torch.randn(n, k // 32, generator=g) * 0.01).blocks
    layers = [[w4(n, k) for n, k in SHAPES] for _ in range(30)]
    head = VnniInt8.pack(torch.randint(-127, 128, (49152, 576), generator=g, dtype=torch.int32).to(torch.int8),
                         torch.rand(49152) * 0.01)
    return layers, head
