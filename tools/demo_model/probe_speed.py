#!/usr/bin/env python3
"""Times the demo target's training step on the GPU (train.py's own step, its MTP head included) at
several batches, with the peak memory of each and the heaviest kernels of a step (torch.profiler).
Random tokens: no text is read. Run on the device, from the repository root:
    python3 tools/demo_model/probe_speed.py --batches 64,96 [--profile]
Measured on the H200 (session 25): batch 64 370 ms a step (177k tokens/s, 64 GiB peak), batch 96 534 ms
(184k tokens/s, 96 GiB): the step scales with the batch, so it is not launch-bound; the profile is
elementwise work (copies, multiplies, adds: ~60% of the GPU time), the matmuls 7%, the triangular
solves 6%. torch.compile of the step recompiled on every call (train.py's GDN call counter is a guarded
global) and was dropped; since session 35 the counter stays out of traced code and --compile 0,1 times
eager and compiled steps side by side (session 36, H100, batch 64: eager 434 ms a step, compiled 168.5 ms)."""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train as tr  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", default="64,96", help="sequences of 1024 tokens per step, comma-separated")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--compile", default="0", help="0, 1 or 0,1: eager and/or torch.compile'd forward (train.py --compile)")
    ap.add_argument("--profile", action="store_true", help="print the top kernels of 3 eager steps at batch 64")
    args = ap.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    vocab = 16384
    special = {name: vocab - len(tr.ADDED_TOKENS) + i for i, (name, _) in enumerate(tr.ADDED_TOKENS)}
    cfg = tr.text_config_dict(tr.TARGET_SHAPE, vocab, special, 32768)
    data = torch.randint(0, vocab, (8_000_000,), dtype=torch.int32, device=dev)
    tr.use_chunked_gdn()

    def build():
        m = tr.new_causal_lm(cfg, 0, dev)
        return m, tr.MtpHead(m, cfg, dev)

    def hp(batch, compiled=False):
        return dict(batch=batch, seq=1024, lr=1.5e-3, warmup=150, wd=0.1, calib=30, max_steps=10**6,
                    log_every=10**9, mtp_weight=0.3, compile=compiled)

    if args.profile:
        from torch.profiler import ProfilerActivity, profile
        m, head = build()
        tr.train_model("warm", m, data, hp(64), 2, None, 0, mtp=head)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            tr.train_model("profiled", m, data, hp(64), 3, None, 0, mtp=head)
        table = prof.key_averages()
        try:
            print(table.table(sort_by="self_cuda_time_total", row_limit=30), flush=True)
        except Exception:  # newer names
            print(table.table(sort_by="self_device_time_total", row_limit=30), flush=True)
        del m, head
    for compiled in [c == "1" for c in args.compile.split(",")]:
        for batch in args.batches.split(","):
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            what = f"batch {batch}{' compiled' if compiled else ''}"
            try:
                m, head = build()
                t = time.time()
                info = tr.train_model(what, m, data, hp(int(batch), compiled), args.steps, None, 0, mtp=head)
                ms = info["steady_ms_per_step"]
                tr.log(f"PROBE {what}: {ms:.1f} ms/step over steps 3..{args.steps} = "
                       f"{int(batch) * 1024 / ms:.0f}k tokens/s; first 3 steps and the rest {time.time() - t:.0f} s; "
                       f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            except torch.cuda.OutOfMemoryError as e:
                tr.log(f"PROBE {what}: out of memory ({str(e)[:160]})")
            m = head = None


if __name__ == "__main__":
    main()
