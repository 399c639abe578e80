"""The two CPU attention rules these scripts compare, installed as `attention.grouped_attention`
(which every layer calls through the module): the fused SDPA kernel at every size (the CPU's
rule since 2026-11-30) and `kernels3`, the rule before it."""
import sglang_cast.models.attention as A

FUSED = A.grouped_attention


def kernels3(q, k, v, bias):
    """The rule before: three plain kernels for masked attention below 64 grouped rows."""
    batch, heads, n, dim = q.shape
    grouped = q.reshape(batch, k.shape[1], (heads // k.shape[1]) * n, dim)
    if bias is None or grouped.shape[2] > 64:
        return FUSED(q, k, v, bias)
    return A.three_kernel_attention(grouped, k, v, bias).reshape(batch, heads, n, dim)
