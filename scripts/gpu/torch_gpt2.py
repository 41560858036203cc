#!/usr/bin/env python3
"""torch_gpt2.py SHAPE.json - the device kit's PyTorch peer for the gpt2 stage: the model of
make_gpt2.py (same shapes: embeddings, LayerNorm, fused QKV, explicit causal softmax
attention, Erf GELU MLP, untied head, cross-entropy) trained with AMP fp16 + GradScaler and
AdamW on random tokens; prints the median ms per step of steps 2..N, tokens/s and TFLOP/s."""
import json
import sys
import time

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(s, d, h, t):
        super().__init__()
        s.h = h
        s.ln_1, s.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.fc, s.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        s.register_buffer("mask", torch.triu(torch.full((t, t), -1e4), 1))

    def forward(s, x):
        B, T, D = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).view(B, T, 3, s.h, D // s.h).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-1, -2) * (D // s.h) ** -0.5 + s.mask, -1)
        x = x + s.c_proj((a @ v).transpose(1, 2).reshape(B, T, D))
        return x + s.proj(nn.functional.gelu(s.fc(s.ln_2(x))))


def main():
    sh = json.load(open(sys.argv[1]))
    L, D, H, V, T, B = sh["layers"], sh["d"], sh["heads"], sh["vocab"], sh["seq"], sh["batch"]
    dev = "cuda"
    wte, wpe = nn.Embedding(V, D).to(dev), nn.Embedding(T, D).to(dev)
    blocks = nn.Sequential(*[Block(D, H, T) for _ in range(L)]).to(dev)
    ln_f, head = nn.LayerNorm(D).to(dev), nn.Linear(D, V, bias=False).to(dev)
    params = [p for m in (wte, wpe, blocks, ln_f, head) for p in m.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-4)
    scaler = torch.amp.GradScaler("cuda")
    tok = torch.randint(0, V, (B, T + 1), device=dev)
    pos = torch.arange(T, device=dev)
    times = []
    for step in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.float16):
            x = blocks(wte(tok[:, :T]) + wpe(pos))
            loss = nn.functional.cross_entropy(head(ln_f(x)).float().view(-1, V), tok[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = sorted(times[1:])[len(times[1:]) // 2]
    print("torch %s AMP fp16 on %s: %.2f ms/step, %.0f tokens/s, %.2f TFLOP/s (loss %.3f)" % (
        torch.__version__, torch.cuda.get_device_name(), ms, B * T / (ms / 1e3),
        sh["flops_per_step"] / (ms / 1e3) / 1e12, loss.item()))


if __name__ == "__main__":
    main()
