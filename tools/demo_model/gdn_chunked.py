"""The gated delta rule for training: chunked (WY form), exact, and fast enough without flash-linear-attention.

What it is: a drop-in for transformers' torch_chunk_gated_delta_rule (same arguments, same float32 math
  up to summation order). That function inverts each chunk's (I + strictly-lower(β·k·kᵀ ⊙ decay)) with
  a 63-step Python loop per layer and step, which makes training launch-bound; here it is one batched
  triangular solve, and only the state recurrence from chunk to chunk stays a loop.
Checked: against the token-by-token definition (recurrent_reference, float64) in train.py's smoke run and
  by tools/demo_model/test_gdn_chunked.py; train.py counts its calls to prove the model really uses it.
"""
import torch
import torch.nn.functional as F


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size=128, initial_state=None,
                                output_final_state=False, use_qk_l2norm_in_kernel=False, **_):
    """The gated delta rule over a whole sequence, chunked (WY form), for training.
    Same contract and float32 math as transformers' torch_chunk_gated_delta_rule, but the per-chunk
    inverse (I + strictly-lower(beta k k^T * decay))^-1 is one batched triangular solve instead of a
    63-step Python loop, and everything but the state recurrence is computed for all chunks at once.
    query, key [B, T, H, Dk]; value [B, T, H, Dv]; g, beta [B, T, H] -> out [B, T, H, Dv], state."""
    # float32 even inside a bf16 autocast region: the state is a sum over the whole sequence.
    with torch.autocast(device_type=query.device.type, enabled=False):
        return _chunked(query, key, value, g, beta, chunk_size, initial_state, output_final_state,
                        use_qk_l2norm_in_kernel)


def _chunked(query, key, value, g, beta, chunk_size, initial_state, output_final_state, use_qk_l2norm_in_kernel):
    dtype = query.dtype
    if use_qk_l2norm_in_kernel:
        query = query * torch.rsqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key * torch.rsqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    q, k, v, beta, g = [x.transpose(1, 2).float() for x in (query, key, value, beta, g)]  # [B, H, T, ..]
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    C = chunk_size
    pad = (C - T % C) % C
    if pad:
        q, k, v = [F.pad(x, (0, 0, 0, pad)) for x in (q, k, v)]
        beta, g = F.pad(beta, (0, pad)), F.pad(g, (0, pad))
    N = (T + pad) // C
    q = (q * Dk ** -0.5).reshape(B, H, N, C, Dk)
    k = k.reshape(B, H, N, C, Dk)
    v = v.reshape(B, H, N, C, Dv)
    beta = beta.reshape(B, H, N, C)
    g = g.reshape(B, H, N, C).cumsum(-1)                                  # log decay from chunk start
    lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    strict = lower.clone().fill_diagonal_(False)
    diff = (g[..., :, None] - g[..., None, :]).masked_fill(~lower, float("-inf"))
    decay = diff.exp()                                                    # [B, H, N, C, C], 0 above
    kb = k * beta[..., None]
    m = ((kb @ k.transpose(-1, -2)) * decay).masked_fill(~strict, 0.0)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    inv = torch.linalg.solve_triangular(eye + m, eye.expand_as(m), upper=False, unitriangular=True)
    u = inv @ (v * beta[..., None])                                       # [B, H, N, C, Dv]
    w = inv @ (kb * g.exp()[..., None])                                   # [B, H, N, C, Dk]
    intra = ((q @ k.transpose(-1, -2)) * decay).masked_fill(~lower, 0.0)  # [B, H, N, C, C]
    qg = q * g.exp()[..., None]
    k_tail = k * (g[..., -1:] - g).exp()[..., None]                       # decay to the chunk's end
    g_end = g[..., -1].exp()                                              # [B, H, N]
    S = (torch.zeros(B, H, Dk, Dv, dtype=q.dtype, device=q.device) if initial_state is None
         else initial_state.float())
    outs = []
    for n in range(N):
        v_new = u[:, :, n] - w[:, :, n] @ S
        outs.append(qg[:, :, n] @ S + intra[:, :, n] @ v_new)
        S = S * g_end[:, :, n, None, None] + k_tail[:, :, n].transpose(-1, -2) @ v_new
    out = torch.stack(outs, 2).reshape(B, H, N * C, Dv)[:, :, :T]
    return out.transpose(1, 2).contiguous().to(dtype), (S if output_final_state else None)


def recurrent_reference(query, key, value, g, beta, use_qk_l2norm_in_kernel=True):
    """Token by token, float64: the definition."""
    if use_qk_l2norm_in_kernel:
        query = query / torch.sqrt((query * query).sum(-1, keepdim=True) + 1e-6)
        key = key / torch.sqrt((key * key).sum(-1, keepdim=True) + 1e-6)
    q, k, v, beta, g = [x.transpose(1, 2).double() for x in (query, key, value, beta, g)]
    B, H, T, Dk = k.shape
    q = q * Dk ** -0.5
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=torch.float64)
    outs = []
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        kv = (S * k[:, :, t, :, None]).sum(-2)
        delta = (v[:, :, t] - kv) * beta[:, :, t, None]
        S = S + k[:, :, t, :, None] * delta[:, :, None, :]
        outs.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(outs, 2).transpose(1, 2), S
