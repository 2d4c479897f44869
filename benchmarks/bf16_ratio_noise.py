"""Where bf16 makes clipping: the log-ratio of the same sampled tokens after the same updates, computed in several
precisions, against a float64 reference (docs/smollm2.md, "Precision").

SmolLM2-135M-Instruct samples 4 arith prompts x 8 completions (float32); three AdamW updates (lr as given, float32,
random +-1 sequence advantages) give the weights theta_1..3. For each precision the log-probs of the completion
tokens are computed at theta_0 (one batch of 32) and at theta_k (two micro-batches of 16 in another row order),
and log r_k = logp_k - logp_0 is compared with float64's:

  float32          every product in float32
  autocast         torch.autocast(bfloat16): products and their outputs in bfloat16 (TRL's bf16=True on a CPU)
  autocast_head32  the same with the LM head in float32
  bf16_inputs      float32 tensors, products with bfloat16 inputs and float32 outputs (oneDNN fp32_precision bf16;
                   CPU only)
  tf32             float32 tensors, matrix products in TF32 (10-bit mantissa inputs; TRL's tf32=True; CUDA only)

With --device cuda everything (sampling, updates, the float64 reference) runs on the GPU, autocast is CUDA's (TRL's
bf16=True on a GPU), and float32 products are IEEE (TF32 off) except in the tf32 mode.

Printed per precision: the largest |log r| between the two layouts at theta_0 (0 = layout-independent), and per
update the standard deviation and maximum of the error of log r, and the tokens outside [0.8, 1.2] in this
precision vs in float64 and how many of them disagree.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bf16_ratio_noise.py [--lr 1e-5] [--seed 0] [--device cpu]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from collections.abc import Iterator

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bandpo_lab.models import builtin_model_dir
from bandpo_lab.tasks.arith import ArithConfig, make_arith_splits
from bandpo_lab.training.tasks import default_cache_dir

MODES = {
    "cpu": ("float32", "autocast", "autocast_head32", "bf16_inputs"),
    "cuda": ("float32", "autocast", "autocast_head32", "tf32"),
}

PRODUCTS = {"bf16_inputs": "bf16", "tf32": "tf32"}
"""Mode -> the float32 products' setting (``fp32_precision``) during its passes; the other modes: ``"ieee"``."""


@contextlib.contextmanager
def fp32_products(device: str, precision: str) -> Iterator[None]:
    """Float32 matrix products in ``precision`` ("ieee", "bf16" on the CPU's oneDNN, "tf32" on CUDA), reset after."""
    backend = torch.backends.mkldnn.matmul if device == "cpu" else torch.backends.cuda.matmul
    before = backend.fp32_precision  # "none" by default: the legacy flags decide (TF32 off)
    backend.fp32_precision = precision
    try:
        yield
    finally:
        backend.fp32_precision = before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=sorted(MODES), default="cpu")
    args = parser.parse_args()
    dev = args.device
    if dev == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    path = builtin_model_dir("smollm2-135m", default_cache_dir(), progress=False)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(dev)
    train, _ = make_arith_splits(ArithConfig(digits=[1, 2], n_train=200, n_test=10))
    prompts = [
        tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in train[:4]
    ]
    enc = tok(prompts * 8, return_tensors="pt", padding=True, padding_side="left").to(dev)
    with torch.no_grad():
        ids = model.generate(
            **enc, do_sample=True, top_k=0, top_p=1.0, max_new_tokens=16, pad_token_id=tok.eos_token_id
        )
    p_len = enc.input_ids.shape[1]
    comp = ids[:, p_len:]  # (32, T)
    is_eos = (comp == tok.eos_token_id).int()
    cmask = ((is_eos.cumsum(1) - is_eos) == 0).int()  # up to and including the first eos
    att = torch.cat([enc.attention_mask, cmask], 1)
    n, t = comp.shape

    def logps(m: torch.nn.Module, mode: str, rows: list[int], chunk: int) -> torch.Tensor:
        out = torch.empty(n, t, dtype=torch.float64, device=dev)
        products = PRODUCTS.get(mode, "ieee")
        for s in range(0, len(rows), chunk):
            r = rows[s : s + chunk]
            ctx = (
                torch.autocast(dev, dtype=torch.bfloat16)
                if mode.startswith("autocast")
                else contextlib.nullcontext()
            )
            with torch.no_grad(), ctx, fp32_products(dev, products):
                h = m.model(input_ids=ids[r], attention_mask=att[r]).last_hidden_state[:, p_len - 1 : -1]
                if mode == "autocast_head32":
                    with torch.autocast(dev, enabled=False):
                        logits = h.float() @ m.lm_head.weight.float().t()
                else:
                    logits = m.lm_head(h)
                lp = logits.float().log_softmax(-1).gather(-1, comp[r, :, None]).squeeze(-1)
            out[r] = lp.double()
        return out

    adv = torch.randn(n).sign().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    states = [copy.deepcopy(model.state_dict())]
    for _ in range(3):
        r = torch.randperm(n)[:16].to(dev)
        lp = model(input_ids=ids[r], attention_mask=att[r]).logits[:, p_len - 1 : -1].log_softmax(-1)
        lp = lp.gather(-1, comp[r, :, None]).squeeze(-1)
        loss = -(adv[r, None] * lp * cmask[r]).sum() / cmask[r].sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        states.append(copy.deepcopy(model.state_dict()))
    model.eval()
    rows_a, perm = list(range(n)), torch.randperm(n).tolist()
    ref_model = copy.deepcopy(model).double()
    ref = []
    for st in states:
        ref_model.load_state_dict({k: v.double() for k, v in st.items()})
        ref.append(logps(ref_model, "float64", rows_a, n))
    mask = cmask.bool()
    print(f"{n} completions, {int(mask.sum())} tokens, lr {args.lr}, seed {args.seed}, device {dev}")
    for mode in MODES[dev]:
        model.load_state_dict(states[0])
        old = logps(model, mode, rows_a, n)
        layout = (old - logps(model, mode, perm, 16))[mask].abs().max().item()
        parts = [f"{mode:<16} layout max |d log r| {layout:.1e}"]
        for k in (1, 2, 3):
            model.load_state_dict(states[k])
            lr_k = (logps(model, mode, perm, 16) - old)[mask]
            lr_ref = (ref[k] - ref[0])[mask]
            err = lr_k - lr_ref
            out, out_ref = (lr_k.exp() - 1).abs() > 0.2, (lr_ref.exp() - 1).abs() > 0.2
            parts.append(
                f"update {k}: err std {err.std():.1e} max {err.abs().max():.1e}, |log r| (float64) "
                f"{lr_ref.abs().mean():.2f}, outside {int(out.sum())} vs {int(out_ref.sum())}, "
                f"{int((out != out_ref).sum())} differ"
            )
        print(" | ".join(parts), flush=True)


if __name__ == "__main__":
    main()
