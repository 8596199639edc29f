#!/usr/bin/env python3
"""gdn_chunked and affine against their definitions, on the CPU (any PyTorch >= 1.13).
Run: python3 tools/demo_model/test_gdn_chunked.py  (prints the largest differences; exits 1 on failure)."""
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import affine  # noqa: E402
from gdn_chunked import chunk_gated_delta_rule, recurrent_reference  # noqa: E402

torch.manual_seed(0)
ok = True
for (B, T, H, Dk, Dv, C) in [(2, 150, 3, 16, 24, 64), (2, 300, 2, 16, 16, 128), (1, 64, 2, 32, 32, 64), (2, 7, 1, 8, 8, 128)]:
    args = [torch.randn(B, T, H, Dk, dtype=torch.float64), torch.randn(B, T, H, Dk, dtype=torch.float64),
            torch.randn(B, T, H, Dv, dtype=torch.float64), -torch.rand(B, T, H, dtype=torch.float64) * 2,
            torch.rand(B, T, H, dtype=torch.float64)]
    out, state = chunk_gated_delta_rule(*args, chunk_size=C, output_final_state=True, use_qk_l2norm_in_kernel=True)
    want, want_state = recurrent_reference(*args)
    xs = [a.clone().requires_grad_() for a in args]
    ys = [a.clone().requires_grad_() for a in args]
    weight = torch.randn_like(want)
    (chunk_gated_delta_rule(*xs, chunk_size=C, use_qk_l2norm_in_kernel=True)[0].double() * weight).sum().backward()
    (recurrent_reference(*ys)[0] * weight).sum().backward()
    errs = [float((out.double() - want).abs().max()), float((state.double() - want_state).abs().max())] + \
        [float((a.grad - b.grad).abs().max()) for a, b in zip(xs, ys)]
    print(f"B={B} T={T} H={H} Dk={Dk} Dv={Dv} chunk {C}: output, state, gradient max abs diff {max(errs):.2e}")
    ok &= max(errs) < 1e-4  # float32 inside against float64: ~1e-6 measured
for bits in (3, 4, 6, 8):
    w = torch.randn(37, 256) * 0.05
    same = torch.equal(affine.fake_quant(w, 64, bits), affine.dequantize(*affine.quantize(w, 64, bits), 64, bits))
    err = float((affine.fake_quant(w, 64, bits) - w).abs().max())
    step = float((w.max() - w.min()) / ((1 << bits) - 1))
    print(f"affine {bits}-bit: fake_quant == dequantize(quantize) {same}, max error {err:.4f} (range/levels {step:.4f})")
    # one step at most (MLX's scale represents the larger edge exactly, so the other edge may clamp), plus
    # the bf16 rounding of the stored scale and bias
    ok &= same and err <= step + float(w.abs().max()) * 2 ** -7
sys.exit(0 if ok else 1)
