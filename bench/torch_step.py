#!/usr/bin/env python3
"""Time GPT-2 training steps in PyTorch on the CPU: the comparison for `meshtrain bench`.

The same model and step as meshtrain (fp32; forward, backward, clip_grad_norm_(1.0),
AdamW with weight decay on the 2-D tensors only), written the way PyTorch recommends on a
CPU: F.scaled_dot_product_attention(is_causal=True), a fused AdamW when this build has
one (else foreach), zero_grad(set_to_none=True), torch.set_num_threads(N).

    python3 bench/torch_step.py --layers 4 --heads 4 --dim 256 --seq 256 --batch 8 \\
        --vocab 256 --threads 1 --steps 10 --warmup 3 [--compile]

Progress goes to stderr; the last stdout line is one JSON object:
    {"engine": "pytorch", "ms_per_step": median, "tokens_per_s": ..., "threads": N,
     "blas": "BLAS_INFO=..., LAPACK_INFO=..., MKL=..., mkldnn=...", "version": ...,
     "peak_rss_mb": ..., "optimizer": "fused" | "foreach", "compile": bool, ...}
Needs torch (and nothing else).  Run it through bench/run_bench.py for a fair
comparison: that also clears OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE and sets OMP_NUM_THREADS.
"""

import argparse
import json
import math
import re
import resource
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# Peak RSS after importing torch, before any model exists: the libraries alone (the CUDA
# wheels load several hundred MB even on a CPU-only machine).
IMPORT_RSS_MB = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):                                   # x: (B, T, C)
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, NH, T, hs)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, L, NH, C, T, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for m in self.modules():  # GPT-2's init: N(0, 0.02) weights, zero biases
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):                        # idx, targets: (B, T)
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for block in self.h:
            x = block(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)    # tied head: (B, T, V)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def blas_summary():
    """What this torch build multiplies matrices with, from torch.__config__.show()."""
    cfg = torch.__config__.show()
    info = dict(re.findall(r"\b(BLAS_INFO|LAPACK_INFO)=([^,\s]+)", cfg))
    return (f"BLAS_INFO={info.get('BLAS_INFO', '?')}, LAPACK_INFO={info.get('LAPACK_INFO', '?')}, "
            f"MKL={torch.backends.mkl.is_available()}, "
            f"mkldnn={torch.backends.mkldnn.is_available()}")


def sdpa_choice(B, NH, T, hs):
    """The kernel scaled_dot_product_attention picks for these shapes on the CPU."""
    try:
        q = torch.zeros(B, NH, T, hs, requires_grad=True)
        kind = torch._fused_sdp_choice(q, q, q, is_causal=True)
        return torch.nn.attention.SDPBackend(kind).name
    except Exception as e:  # a private API: say so rather than fail the benchmark
        return f"unknown ({type(e).__name__})"


def make_optimizer(model, lr, wd):
    """AdamW, weight decay on the 2-D tensors only.  Fused if this build supports it on the
    CPU (it is tried on a scratch tensor first), otherwise the foreach implementation."""
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() == 2], "weight_decay": wd},
              {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}]
    try:
        probe = torch.zeros(4, requires_grad=True)
        probe.grad = torch.ones(4)
        torch.optim.AdamW([probe], lr=lr, fused=True).step()
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, fused=True), "fused"
    except (RuntimeError, TypeError) as e:
        print(f"fused AdamW unavailable ({e}); using foreach", file=sys.stderr)
        return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8,
                                 foreach=True), "foreach"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    args = ap.parse_args()
    if args.dim % args.heads or min(vars(args)[k] for k in ("layers", "heads", "dim", "seq",
                                                            "batch", "vocab", "threads",
                                                            "steps")) < 1:
        sys.exit(f"bad sizes: {vars(args)}")

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    B, T = args.batch, args.seq
    model = GPT2(args.layers, args.heads, args.dim, T, args.vocab)
    opt, opt_kind = make_optimizer(model, lr=1e-3, wd=0.1)
    step_model = model
    if args.compile:
        step_model = torch.compile(model)
    # A few fixed random batches, made before timing starts.
    data = torch.randint(0, args.vocab, (4, B, T + 1))
    batches = [(d[:, :-1].contiguous(), d[:, 1:].contiguous()) for d in data]

    def train_step(i):
        idx, targets = batches[i % len(batches)]
        loss = step_model(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    all_times = []
    for i in range(args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = train_step(i)
        dt = time.perf_counter() - t0
        all_times.append(dt)
        print(f"step {i}{' (warmup)' if i < args.warmup else ''}: "
              f"{dt * 1000:.1f} ms, loss {loss:.4f}", file=sys.stderr)
        if not math.isfinite(loss):
            sys.exit(f"loss is {loss} at step {i}")

    ms = statistics.median(all_times[args.warmup:]) * 1000
    result = {"engine": "pytorch", "ms_per_step": round(ms, 3),
              "tokens_per_s": round(B * T / ms * 1000, 1), "threads": args.threads,
              "blas": blas_summary(), "version": torch.__version__,
              "sdpa": sdpa_choice(B, args.heads, T, args.dim // args.heads),
              # ru_maxrss is in KiB on Linux
              "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
              "import_rss_mb": round(IMPORT_RSS_MB, 1),
              "optimizer": opt_kind, "compile": args.compile,
              # the first step includes one-time costs (with --compile: the compilation)
              "first_step_ms": round(all_times[0] * 1000, 1)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
