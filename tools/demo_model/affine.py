"""MLX affine quantization in PyTorch, bit for bit what `kapitsa quantize` writes.

What it is: per group of `group_size` values along the last axis, w ≈ scale·q + bias with q an unsigned
  `bits`-bit code; codes packed little-end-first into uint32 words (mlx-lm's layout). The scale/bias
  choice is MLX's (and src/models/affine_quantize.cpp's): the group's edge of larger magnitude is
  represented exactly, so a zero-centred group keeps its extremes. Codes are computed from the float32
  scale and bias; the stored scale and bias are then rounded to bf16, as the C++ quantizer does.
Used by train.py for quantization-aware training (fake_quant) and for the shipped checkpoint (quantize).
"""
import torch


def group_params(w, group_size, bits):
    """w [..., K] float32 -> scale, bias [..., K/group] float32 (before any bf16 rounding)."""
    n_bins = float((1 << bits) - 1)
    g = w.reshape(*w.shape[:-1], -1, group_size)
    lo, hi = g.amin(-1), g.amax(-1)
    low_edge = lo.abs() > hi.abs()
    scale = torch.clamp((hi - lo) / n_bins, min=1e-7)
    scale = torch.where(low_edge, scale, -scale)
    edge = torch.where(low_edge, lo, hi)
    q0 = torch.round(edge / scale)
    zero = q0 == 0
    return torch.where(zero, scale, edge / torch.where(zero, torch.ones_like(q0), q0)), \
        torch.where(zero, torch.zeros_like(edge), edge)


def codes_of(w, scale, bias, group_size, bits):
    """The integer codes [..., K] (int64) of w for the given per-group float32 scale and bias."""
    n_bins = float((1 << bits) - 1)
    g = w.reshape(*w.shape[:-1], -1, group_size)
    q = torch.clamp(torch.round((g - bias[..., None]) / scale[..., None]), 0.0, n_bins)
    return q.reshape(w.shape).to(torch.int64)


def quantize(w, group_size=64, bits=4, dtype=torch.bfloat16):
    """w [..., N, K] -> (packed uint32 codes [..., N, K·bits/32] as int32 bits, scales, biases [..., N, K/group])."""
    w = w.detach().float()
    scale, bias = group_params(w, group_size, bits)
    q = codes_of(w, scale, bias, group_size, bits)
    K = w.shape[-1]
    assert K % 32 == 0, "rows must be whole uint32 words"
    pos = torch.arange(K, device=w.device) * bits                  # bit position of each code in its row
    words = torch.zeros(*w.shape[:-1], K * bits // 32, dtype=torch.int64, device=w.device)
    lo_word, shift = pos // 32, pos % 32
    words.index_add_(-1, lo_word, (q << shift) & 0xFFFFFFFF)
    spill = shift + bits > 32                                      # codes that straddle two words (3, 5, 6 bits)
    if bool(spill.any()):
        words.index_add_(-1, lo_word[spill] + 1, q[..., spill] >> (32 - shift[spill]))
    packed = torch.where(words >= 2 ** 31, words - 2 ** 32, words).to(torch.int32)  # same bits as uint32
    return packed, scale.to(dtype), bias.to(dtype)


def dequantize(packed, scale, bias, group_size=64, bits=4):
    """Inverse of quantize: [..., N, K] float32 = scale·q + bias with the stored (rounded) scale and bias."""
    words = packed.to(torch.int64) & 0xFFFFFFFF
    K = packed.shape[-1] * 32 // bits
    pos = torch.arange(K, device=packed.device) * bits
    lo_word, shift = pos // 32, pos % 32
    both = words[..., lo_word] >> shift
    hi_idx = torch.clamp(lo_word + 1, max=words.shape[-1] - 1)
    both = both | torch.where(shift + bits > 32, words[..., hi_idx] << (32 - shift), torch.zeros_like(both))
    q = (both & ((1 << bits) - 1)).float()
    g = q.reshape(*q.shape[:-1], -1, group_size)
    return (g * scale.float()[..., None] + bias.float()[..., None]).reshape(q.shape)


def fake_quant(w, group_size=64, bits=4, dtype=torch.bfloat16):
    """What the shipped checkpoint computes with, dequantize(quantize(w)) in float32, without packing
    (cheap enough to run on every weight at every training step)."""
    w = w.detach().float()
    scale, bias = group_params(w, group_size, bits)
    q = codes_of(w, scale, bias, group_size, bits).float().reshape(*w.shape[:-1], -1, group_size)
    return (q * scale.to(dtype).float()[..., None] + bias.to(dtype).float()[..., None]).reshape(w.shape)
