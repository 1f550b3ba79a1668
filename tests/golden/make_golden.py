#!/usr/bin/env python3
"""Write the golden file that meshtrain's golden test compares against.

One training step of GPT-2 (forward, backward, gradient clipping, AdamW) on one batch,
computed by this independent reference and saved as a safetensors file:

    loss            []      mean cross-entropy over all B*T positions
    grad_norm       []      global L2 norm of all gradients, before clipping
    grad.<name>     shape   gradient of the mean loss, for every parameter
    step1.<name>    shape   the parameters after one clipped AdamW step
    loss2           []      the loss of the same batch with the step1 parameters

Precision: the checkpoint is float32 (as meshtrain trains in float32), but every result
here is computed in float64 from those float32 values and only then rounded to float32.
The golden file is therefore (almost) the exact answer, independent of PyTorch's float32
kernels and their thread count; meshtrain's float32 results should agree to ~1e-5.
`--check` also runs the step in float32 with PyTorch's own building blocks
(F.layer_norm, F.scaled_dot_product_attention, F.gelu, F.cross_entropy,
clip_grad_norm_, torch.optim.AdamW) and fails if it disagrees with the float64 path.

Two things a comparison must allow for:
  - The key part of c_attn.bias (elements C..2C-1) has a zero gradient in exact
    arithmetic: adding a constant to every key shifts all scores of a query equally,
    and softmax ignores that.  float32 leaves rounding noise there, so compare
    gradients relative to each tensor's largest element, not element by element.
  - AdamW's first step moves each element by lr * g / (|g| + eps), about lr*sign(g);
    where |g| is near eps (1e-8), as for those key biases, the float32 step is noise
    of up to lr.  Compare step1 with an absolute tolerance of a small fraction of lr.

Inputs: sequence b (b = 0..B-1) is tokens[b*T : b*T+T] and its targets are
tokens[b*T+1 : b*T+T+1], so B*T+1 tokens are read from the start of the file.

Regenerate (scripts/make-golden.sh does this: it first writes the checkpoint with
`meshtrain train --steps 0 --save DIR` and the tokens file):

    python3 tests/golden/make_golden.py --ckpt DIR --tokens FILE --batch 4 --seq 64 \\
        --lr 1e-3 --weight-decay 0.1 --grad-clip 1.0 --out tests/data/golden.safetensors

Needs python3 with torch and numpy, nothing else; the safetensors format is read and
written by hand below.  The script is deterministic: no random numbers, one thread.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

BETA1, BETA2, ADAM_EPS = 0.9, 0.95, 1e-8
CLIP_EPS = 1e-6  # as torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6)


# ---------------------------------------------------------------------------------------
# File formats

def read_safetensors(path):
    """Return ({name: float32 ndarray}, metadata dict) from a safetensors file (F32 only)."""
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        sys.exit(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        sys.exit(f"{path}: header length {n} runs past the end of the file ({len(blob)} bytes)")
    header = json.loads(blob[8:8 + n])
    data = memoryview(blob)[8 + n:]
    meta = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] != "F32":
            sys.exit(f"{path}: tensor {name} has dtype {info['dtype']}, only F32 is supported")
        begin, end = info["data_offsets"]
        shape = tuple(info["shape"])
        if not (0 <= begin <= end <= len(data)) or end - begin != 4 * math.prod(shape):
            sys.exit(f"{path}: tensor {name} shape {list(shape)} does not fit "
                     f"data_offsets [{begin}, {end}] in a {len(data)}-byte buffer")
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(shape).copy()
    return tensors, meta


def write_safetensors(path, tensors, meta):
    """Write {name: array} as F32 safetensors.  The header is padded with spaces so the
    data buffer starts 8-byte aligned; tensors follow each other with no gaps (the format
    requires that), in the order given."""
    header, chunks, offset = {}, [], 0
    for name, arr in tensors.items():
        raw = np.ascontiguousarray(arr, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(np.shape(arr)),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    header["__metadata__"] = {k: str(v) for k, v in meta.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in chunks:
            f.write(raw)


def read_tokens(path, needed):
    """Read the first `needed` tokens of a meshtrain token file as an int64 array.

    Header (32 bytes, little-endian): magic "MTTOKENS", u32 version = 1,
    u32 token_bytes (1, 2 or 4), u64 count, u32 vocab_size, u32 reserved = 0."""
    with open(path, "rb") as f:
        head = f.read(32)
        if len(head) != 32 or head[:8] != b"MTTOKENS":
            sys.exit(f"{path}: not a meshtrain token file (bad magic)")
        version, token_bytes, count, vocab, _ = struct.unpack("<IIQII", head[8:])
        if version != 1 or token_bytes not in (1, 2, 4):
            sys.exit(f"{path}: unsupported version {version} or token_bytes {token_bytes}")
        if count < needed:
            sys.exit(f"{path}: holds {count} tokens, the batch needs {needed}")
        raw = f.read(needed * token_bytes)
    if len(raw) != needed * token_bytes:
        sys.exit(f"{path}: truncated (header says {count} tokens)")
    dtype = {1: "<u1", 2: "<u2", 4: "<u4"}[token_bytes]
    return np.frombuffer(raw, dtype=dtype).astype(np.int64), vocab


# ---------------------------------------------------------------------------------------
# The model

def param_shapes(cfg):
    """Parameter names in Hugging Face GPT-2 order, with their shapes."""
    V, T, C, L = cfg["vocab_size"], cfg["n_positions"], cfg["n_embd"], cfg["n_layer"]
    shapes = {"transformer.wte.weight": (V, C), "transformer.wpe.weight": (T, C)}
    for i in range(L):
        h = f"transformer.h.{i}."
        shapes.update({
            h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
            h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
            h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
            h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
            h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
            h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,),
        })
    shapes["transformer.ln_f.weight"] = (C,)
    shapes["transformer.ln_f.bias"] = (C,)
    return shapes


def layernorm(x, w, b, eps):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def gpt2_loss(p, cfg, idx, targets):
    """Mean cross-entropy of GPT-2, written out op by op (Conv1D weights: y = x @ W + b).
    Works in the dtype of the parameters p (a dict of tensors)."""
    B, T = idx.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hs = C // NH
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    x = p["transformer.wte.weight"][idx] + p["transformer.wpe.weight"][:T]  # (B, T, C)
    for i in range(cfg["n_layer"]):
        w = lambda s: p[f"transformer.h.{i}.{s}"]
        # attention
        h = layernorm(x, w("ln_1.weight"), w("ln_1.bias"), eps)
        qkv = h @ w("attn.c_attn.weight") + w("attn.c_attn.bias")          # (B, T, 3C)
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)                      # (B, NH, T, T)
        att = torch.softmax(att.masked_fill(~causal, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)                       # (B, T, C)
        x = x + y @ w("attn.c_proj.weight") + w("attn.c_proj.bias")
        # MLP
        h = layernorm(x, w("ln_2.weight"), w("ln_2.bias"), eps)
        h = gelu_tanh(h @ w("mlp.c_fc.weight") + w("mlp.c_fc.bias"))         # (B, T, 4C)
        x = x + h @ w("mlp.c_proj.weight") + w("mlp.c_proj.bias")
    x = layernorm(x, p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    logits = x @ p["transformer.wte.weight"].T                               # (B, T, V)
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, targets.unsqueeze(-1)).mean()


def reference_step(params32, cfg, idx, targets, lr, wd, clip):
    """The float64 reference: loss, grads, grad_norm, step1 params, loss2 (all float64)."""
    p = {n: torch.tensor(a, dtype=torch.float64, requires_grad=True) for n, a in params32.items()}
    loss = gpt2_loss(p, cfg, idx, targets)
    loss.backward()
    grads = {n: t.grad.detach() for n, t in p.items()}
    grad_norm = torch.sqrt(sum((g ** 2).sum() for g in grads.values()))
    coef = min(1.0, clip / (grad_norm.item() + CLIP_EPS))
    step1 = {}
    for n, t in p.items():
        # torch.optim.AdamW, step 1, from zero moments; weight decay on 2-D tensors only.
        g = grads[n] * coef
        m = (1 - BETA1) * g
        v = (1 - BETA2) * g * g
        decay = wd if t.dim() == 2 else 0.0
        theta = t.detach() * (1 - lr * decay)
        denom = v.sqrt() / math.sqrt(1 - BETA2) + ADAM_EPS
        step1[n] = theta - (lr / (1 - BETA1)) * m / denom
    with torch.no_grad():
        loss2 = gpt2_loss(step1, cfg, idx, targets)
    return loss.detach(), grads, grad_norm, step1, loss2


# ---------------------------------------------------------------------------------------
# The float32 cross-check, with PyTorch's own building blocks

def torch_loss(p, cfg, idx, targets):
    B, T = idx.shape
    C, NH, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    x = F.embedding(idx, p["transformer.wte.weight"]) + p["transformer.wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        w = lambda s: p[f"transformer.h.{i}.{s}"]
        h = F.layer_norm(x, (C,), w("ln_1.weight"), w("ln_1.bias"), eps)
        q, k, v = torch.addmm(w("attn.c_attn.bias"), h.view(B * T, C),
                              w("attn.c_attn.weight")).view(B, T, 3 * C).split(C, dim=-1)
        q, k, v = (t.view(B, T, NH, C // NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
        x = x + torch.addmm(w("attn.c_proj.bias"), y.reshape(B * T, C),
                            w("attn.c_proj.weight")).view(B, T, C)
        h = F.layer_norm(x, (C,), w("ln_2.weight"), w("ln_2.bias"), eps)
        h = F.gelu(torch.addmm(w("mlp.c_fc.bias"), h.view(B * T, C), w("mlp.c_fc.weight")),
                   approximate="tanh")
        x = x + torch.addmm(w("mlp.c_proj.bias"), h, w("mlp.c_proj.weight")).view(B, T, C)
    x = F.layer_norm(x, (C,), p["transformer.ln_f.weight"], p["transformer.ln_f.bias"], eps)
    return F.cross_entropy((x @ p["transformer.wte.weight"].T).view(B * T, -1), targets.view(-1))


def check_float32(params32, cfg, idx, targets, lr, wd, clip, ref):
    """Run the step in float32 with torch's modules and optimizer; return the worst
    disagreement with the float64 reference (relative to each tensor's scale)."""
    loss64, grads64, norm64, step64, loss2_64 = ref
    p = {n: torch.tensor(a, requires_grad=True) for n, a in params32.items()}
    loss = torch_loss(p, cfg, idx, targets)
    loss.backward()
    grads = {n: t.grad.clone() for n, t in p.items()}
    norm = torch.nn.utils.clip_grad_norm_(list(p.values()), clip)
    groups = [{"params": [t for t in p.values() if t.dim() == 2], "weight_decay": wd},
              {"params": [t for t in p.values() if t.dim() != 2], "weight_decay": 0.0}]
    torch.optim.AdamW(groups, lr=lr, betas=(BETA1, BETA2), eps=ADAM_EPS, foreach=False).step()
    with torch.no_grad():
        loss2 = torch_loss(p, cfg, idx, targets)

    def rel(a, b):  # |a - b| relative to b's scale
        a, b = a.double(), b.double()
        return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()

    def step_err(n):  # how far the float32 step lands from the reference, in units of lr
        d = (p[n].detach().double() - step64[n]).abs() / lr
        if n.endswith("c_attn.bias"):  # leave out the key slice: noise (see the docstring)
            C = cfg["n_embd"]
            d = torch.cat([d[:C], d[2 * C:]])
        return d.max().item()

    return {"loss": rel(loss, loss64), "grad_norm": rel(norm, norm64),
            "loss2": rel(loss2, loss2_64), "grad": max(rel(grads[n], grads64[n]) for n in p),
            "step1/lr": max(step_err(n) for n in p)}


# ---------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", required=True, help="checkpoint dir: config.json, model.safetensors")
    ap.add_argument("--tokens", required=True, help="meshtrain token file")
    ap.add_argument("--batch", type=int, required=True, help="B, sequences per batch")
    ap.add_argument("--seq", type=int, required=True, help="T, tokens per sequence")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--out", required=True, help="golden safetensors file to write")
    ap.add_argument("--check", action="store_true",
                    help="also run the step in float32 with torch's modules and compare")
    args = ap.parse_args()

    torch.set_num_threads(1)  # one thread: the same bits on every run and machine
    torch.use_deterministic_algorithms(True)

    with open(os.path.join(args.ckpt, "config.json")) as f:
        cfg = json.load(f)
    cfg.setdefault("layer_norm_epsilon", 1e-5)
    if cfg.get("n_inner") not in (None, 4 * cfg["n_embd"]) or \
            cfg.get("activation_function", "gelu_new") != "gelu_new":
        sys.exit(f"{args.ckpt}: only n_inner = 4*n_embd and gelu_new are supported")
    B, T = args.batch, args.seq
    if cfg["n_embd"] % cfg["n_head"] or T > cfg["n_positions"] or B < 1 or T < 1:
        sys.exit(f"bad shapes: n_embd {cfg['n_embd']} n_head {cfg['n_head']} "
                 f"n_positions {cfg['n_positions']} batch {B} seq {T}")

    loaded, _ = read_safetensors(os.path.join(args.ckpt, "model.safetensors"))
    params32 = {}
    for name, shape in param_shapes(cfg).items():
        if name not in loaded:
            sys.exit(f"{args.ckpt}: model.safetensors lacks {name}")
        if loaded[name].shape != shape:
            sys.exit(f"{args.ckpt}: {name} has shape {list(loaded[name].shape)}, "
                     f"config.json implies {list(shape)}")
        params32[name] = loaded[name]
    extra = sorted(set(loaded) - set(params32))
    if extra:
        print(f"note: ignoring {len(extra)} unexpected tensors, e.g. {extra[0]}", file=sys.stderr)

    tokens, file_vocab = read_tokens(args.tokens, B * T + 1)
    if tokens.max() >= cfg["vocab_size"]:
        sys.exit(f"{args.tokens}: token {tokens.max()} >= vocab_size {cfg['vocab_size']}")
    idx = torch.from_numpy(tokens[:B * T].reshape(B, T))          # (B, T)
    targets = torch.from_numpy(tokens[1:B * T + 1].reshape(B, T))  # (B, T)

    ref = reference_step(params32, cfg, idx, targets, args.lr, args.weight_decay, args.grad_clip)
    loss, grads, grad_norm, step1, loss2 = ref

    # Parameter tensors first, the three scalars last: then every tensor starts 8-byte
    # aligned whenever C is even (all parameter sizes are multiples of C).
    out = {f"grad.{n}": g.float().numpy() for n, g in grads.items()}
    out.update({f"step1.{n}": t.float().numpy() for n, t in step1.items()})
    out.update({"loss": loss.float().numpy(), "grad_norm": grad_norm.float().numpy(),
                "loss2": loss2.float().numpy()})
    meta = {"batch": B, "seq": T, "lr": args.lr, "weight_decay": args.weight_decay,
            "grad_clip": args.grad_clip, "beta1": BETA1, "beta2": BETA2, "eps": ADAM_EPS,
            "decay": "2-D parameters only", "precision": "float64, stored as float32",
            "n_layer": cfg["n_layer"], "n_head": cfg["n_head"], "n_embd": cfg["n_embd"],
            "vocab_size": cfg["vocab_size"], "n_positions": cfg["n_positions"],
            "tokens_file": os.path.basename(args.tokens)}
    write_safetensors(args.out, out, meta)

    print(f"loss      {loss.item():.9f}")
    print(f"grad_norm {grad_norm.item():.9f}")
    print(f"loss2     {loss2.item():.9f}")
    print(f"wrote {args.out}: {len(out)} tensors")

    if args.check:
        worst = check_float32(params32, cfg, idx, targets, args.lr, args.weight_decay,
                              args.grad_clip, ref)
        print("float32 torch vs float64 reference: "
              + ", ".join(f"{k} {v:.2e}" for k, v in worst.items()))
        bad = [k for k, v in worst.items() if v > (1e-2 if k == "step1/lr" else 1e-4)]
        if bad or not loss2 < loss:
            sys.exit(f"check FAILED: {bad or 'loss2 >= loss'}")
        print("check ok")


if __name__ == "__main__":
    main()
