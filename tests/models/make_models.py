#!/usr/bin/env python3
"""make_models.py - writes the reference-model fixtures of tests/models (issue 11, DESIGN.md 2).

Needs PyTorch (torch, torchvision, transformers, onnx, onnxscript) and is run by hand, never
in CI (check_models.py reads only what this writes):

    python3 -m venv /work/torchenv
    /work/torchenv/bin/pip install torch torchvision transformers onnx onnxscript onnxruntime numpy
    /work/torchenv/bin/python tests/models/make_models.py [MODEL ...]

Six small, randomly initialized models: resnet18 (torchvision BasicBlocks, widths 8..64),
mobilenet_v3_small (width 0.25), vit (torchvision VisionTransformer, 2 layers, dim 32),
gpt2 (transformers, 2 layers, its causal-LM loss), bert (transformers, 2 layers, masked-LM
loss) and mlp (Linear + LayerNorm + GELU). Dropout probabilities are 0 so that PyTorch and
apexc compute the same function. Each is exported four ways into tests/models/MODEL/EXPORT/
model.onnx:

    readme         the README recipe: a hand-written wrapper returning (loss, logits) and
                   torch.onnx.export(dynamo=False, training=TRAINING, do_constant_folding=False,
                   opset_version=17); parameter names carry the wrapper's "model." prefix
    helper_legacy  scripts/apexc_torch.export(exporter="legacy")
    helper_dynamo  scripts/apexc_torch.export(exporter="dynamo")  (optimizer off + BN fix-up)
    dynamo_default the README wrapper through torch.onnx.export(dynamo=True) with its defaults
                   (opset 20, ONNX optimizer on), what a new user gets without the helper; kept
                   for comparison: its optimizer folds BatchNorm into Conv, merges equal
                   initializers and stores scalars as initializers

and PyTorch's reference (torch.backends.mkldnn.enabled = False), shared by the exports:

    MODEL/data/NAME.npy      training data, one file per graph input, samples along axis 0:
                             4 batches; `apexrun --no-shuffle` order: step k trains on samples
                             [jB, (j+1)B), j = k mod 4 (the file wraps around)
    MODEL/eval/NAME.npy      one fixed batch of the model's inputs (no labels)
    MODEL/reference.json     lr, steps, batch, per-step losses of 20 SGD steps in float32 and
                             in float64 (same initial weights and data), which of the two O0
                             is judged against, output names, versions, per-export info
    MODEL/grads.npz          first-step parameter gradients, float32 run (named_parameters names)
    MODEL/grads64.npz        the same from the float64 run
    MODEL/eval_outputs.npz   model outputs (output_0, ...) of the fp32 model after the 20 steps,
                             in eval() mode, on eval/ (what `apexrun --export-onnx` must give)

and PyTorch's own mixed precision on the same steps, the yardstick for apexc's -O1/-O2 (how
far mixed precision itself moves the losses from fp32 on this model), in reference.json:

    amp_fp16                 torch.autocast("cpu", float16) with torch.amp.GradScaler(
                             init_scale=AMP_INIT_SCALE): per-step losses, skipped steps, max
                             relative difference from losses_fp32 (all steps, first 5)
    amp_bf16                 torch.autocast("cpu", bfloat16), no loss scaling: the same

`make_models.py --amp-only [MODEL ...]` adds just these to existing fixtures (rebuilding the
same initial weights, checked against the stored fp32 losses) and changes nothing else.

SGD: torch.optim.SGD(lr, momentum 0, weight decay 0) = `apexc --optimizer sgd --lr LR`.
Deterministic (fixed seeds); run again, it writes the same numbers on the same versions.
"""
import argparse
import contextlib
import io
import json
import os
import platform
import shutil
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import apexc_torch  # noqa: E402

STEPS = 20
BATCHES = 4  # distinct training batches, cycled: step k trains on batch k % BATCHES
AMP_INIT_SCALE = 1024.0  # GradScaler's initial scale; check_models.py gives apexc the same
EXPORTS = ("readme", "helper_legacy", "helper_dynamo", "dynamo_default")


# ---- the models ---------------------------------------------------------------------------

def _resnet18(width=8, num_classes=10):
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]) with stage widths w, 2w, 4w, 8w."""
    from torchvision.models.resnet import BasicBlock, ResNet

    class NarrowResNet(ResNet):
        def __init__(self):
            nn.Module.__init__(self)
            self._norm_layer = nn.BatchNorm2d
            self.inplanes, self.dilation, self.groups, self.base_width = width, 1, 1, 64
            self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
            self.layer1 = self._make_layer(BasicBlock, width, 2)
            self.layer2 = self._make_layer(BasicBlock, 2 * width, 2, stride=2)
            self.layer3 = self._make_layer(BasicBlock, 4 * width, 2, stride=2)
            self.layer4 = self._make_layer(BasicBlock, 8 * width, 2, stride=2)
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(8 * width, num_classes)
            for m in self.modules():  # torchvision's initialization
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
    return NarrowResNet()


class _MLP(nn.Module):
    def __init__(self, d_in=16, d=64, n_cls=10):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d)
        self.ln1 = nn.LayerNorm(d)
        self.fc2 = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.head = nn.Linear(d, n_cls)

    def forward(self, x):
        x = F.gelu(self.ln1(self.fc1(x)))
        x = F.gelu(self.ln2(self.fc2(x)))
        return self.head(x)


def _images(rng, n, c=3, hw=32):
    return rng.standard_normal((n, c, hw, hw)).astype(np.float32)


def _tokens(rng, n, t, vocab):
    return rng.integers(0, vocab, size=(n, t)).astype(np.int64)


VOCAB, SEQ = 128, 16


def _vision(build, batch, lr, hw=32, o0_ref="fp32", note=""):
    def data(rng, n):
        return {"x": _images(rng, n, hw=hw),
                "labels": rng.integers(0, 10, size=(n,)).astype(np.int64)}
    return dict(build=build, batch=batch, lr=lr, data=data, inputs=["x"], targets=["labels"],
                loss="cross_entropy", o0_ref=o0_ref, note=note)


def _gpt2():
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=VOCAB,
                                  n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, use_cache=False, bos_token_id=0,
                                  eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg)


def _bert():
    import transformers
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=VOCAB,
                                  max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0, pad_token_id=0)
    return transformers.BertForMaskedLM(cfg)


def _hf(build, batch, lr, masked):
    def data(rng, n):
        ids = _tokens(rng, n, SEQ, VOCAB)
        if masked:  # MLM: predict 25% of the positions; the rest are ignore_index -100
            labels = np.full_like(ids, -100)
            pick = rng.random(ids.shape) < 0.25
            labels[pick] = ids[pick]
            ids = ids.copy()
            ids[pick] = 1  # the [MASK] token of this small vocabulary
        else:
            labels = ids.copy()  # causal LM: the model shifts the labels itself
        return {"input_ids": ids, "attention_mask": np.ones_like(ids), "labels": labels}
    return dict(build=build, batch=batch, lr=lr, data=data,
                inputs=["input_ids", "attention_mask", "labels"], targets=[], loss="model",
                o0_ref="fp32", note="")


def _models():
    import torchvision
    return {
        # 64x64 images and batch 8 keep BatchNorm's batch statistics well conditioned (8
        # samples x 2x2 positions in the last stage): with 32x32 images, batch 4 and lr 0.02
        # PyTorch's own fp32 and fp64 runs part by 1e-4 after one step and 7e-2 by step 5
        "resnet18": _vision(_resnet18, 8, 0.01, hw=64, o0_ref="fp64", note=(
            "random labels can make BatchNorm training chaotic; in this configuration PyTorch's "
            "fp32 run stays within 3e-7 of its fp64 run for all 20 steps, so O0 is judged "
            "against the fp64 losses on every step")),
        "mobilenet_v3_small": _vision(lambda: torchvision.models.mobilenet_v3_small(
            num_classes=10, width_mult=0.25, dropout=0.0), 8, 0.1, hw=64),
        "vit": _vision(lambda: torchvision.models.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
            num_classes=10), 4, 0.05),
        "gpt2": _hf(_gpt2, 2, 0.1, masked=False),
        "bert": _hf(_bert, 2, 0.1, masked=True),
        "mlp": dict(build=_MLP, batch=8, lr=0.1, inputs=["x"], targets=["labels"],
                    loss="cross_entropy", o0_ref="fp32", note="",
                    data=lambda rng, n: {"x": rng.standard_normal((n, 16)).astype(np.float32),
                                         "labels": rng.integers(0, 10, size=(n,)).astype(np.int64)}),
    }


# ---- one training step, as the exported graph computes it -----------------------------------

class ReadmeWrapper(nn.Module):
    """What the README recipe asks users to write: the model with its loss, (loss, logits)."""

    def __init__(self, model, spec):
        super().__init__()
        self.model = model
        self.spec = spec

    def forward(self, *args):
        if self.spec["loss"] == "model":
            ids, mask, labels = args
            out = self.model(input_ids=ids, attention_mask=mask, labels=labels)
            return out.loss, out.logits
        x, labels = args
        logits = self.model(x)
        return F.cross_entropy(logits, labels), logits


def _to_torch(arrs, dtype):
    return [torch.from_numpy(a).to(dtype) if a.dtype.kind == "f" else torch.from_numpy(a)
            for a in arrs]


def _batch(data, names, k, b):
    k %= BATCHES  # apexrun --no-shuffle wraps around the file the same way
    return [data[n][k * b:(k + 1) * b] for n in names]


def train_reference(spec, model, data, dtype):
    """20 SGD steps; returns (losses, first-step grads, the trained model)."""
    model = model.to(dtype)
    model.train()
    w = ReadmeWrapper(model, spec)
    names = spec["inputs"] + spec["targets"]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=spec["lr"])
    losses, grads = [], None
    for k in range(STEPS):
        opt.zero_grad()
        loss, _ = w(*_to_torch(_batch(data, names, k, spec["batch"]), dtype))
        loss.backward()
        if grads is None:
            grads = {n: p.grad.detach().numpy().copy() for n, p in model.named_parameters()
                     if p.grad is not None}
        opt.step()
        losses.append(loss.item())
    return losses, grads, model


def train_amp(spec, model, data, half):
    """20 SGD steps under PyTorch's CPU autocast (half: "fp16" with a GradScaler from
    AMP_INIT_SCALE, "bf16" without loss scaling). Returns the reference.json entry."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[half]
    model = model.to(torch.float32)
    model.train()
    w = ReadmeWrapper(model, spec)
    names = spec["inputs"] + spec["targets"]
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=spec["lr"])
    scaler = torch.amp.GradScaler("cpu", init_scale=AMP_INIT_SCALE, enabled=half == "fp16")
    losses, skipped = [], 0
    for k in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss, _ = w(*_to_torch(_batch(data, names, k, spec["batch"]), torch.float32))
        before = scaler.get_scale() if half == "fp16" else 1.0
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        if half == "fp16" and scaler.get_scale() < before:
            skipped += 1
        losses.append(float(loss.item()))
    return losses, skipped


def amp_references(spec, build_model, data, losses32):
    """reference.json's amp_fp16 and amp_bf16 entries (see the module docstring)."""
    out = {}
    for half in ("fp16", "bf16"):
        losses, skipped = train_amp(spec, build_model(), data, half)
        d = [abs(a - b) / abs(b) for a, b in zip(losses, losses32)]
        out["amp_" + half] = {
            "losses": losses, "skipped": skipped, "vs_fp32_max_rel": max(d),
            "vs_fp32_max_rel_first5": max(d[:5]),
            "how": (f"torch.autocast('cpu', {'float16' if half == 'fp16' else 'bfloat16'})"
                    + (f", GradScaler(init_scale={AMP_INIT_SCALE:g})" if half == "fp16"
                       else ", no loss scaling")),
        }
    return out


def eval_outputs(spec, model, batch_arrays):
    """PyTorch eval() outputs (everything but the loss) on one batch."""
    model.eval()
    with torch.no_grad():
        if spec["loss"] == "model":
            ids, mask = _to_torch(batch_arrays, torch.float32)
            outs = [model(input_ids=ids, attention_mask=mask).logits]
        else:
            (x,) = _to_torch(batch_arrays, torch.float32)
            outs = [model(x)]
    model.train()
    return {f"output_{i}": o.numpy() for i, o in enumerate(outs)}


# ---- the three exports ----------------------------------------------------------------------

@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield


def export_all(name, spec, model, example, outdir):
    """example: dict input name -> one batch (numpy). Returns per-export info."""
    names = spec["inputs"] + spec["targets"]
    args = _to_torch([example[n] for n in names], torch.float32)
    info = {}
    for exp in EXPORTS:
        d = os.path.join(outdir, exp)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "model.onnx")
        with _quiet():
            if exp == "readme":
                w = ReadmeWrapper(model, spec)
                w.train()
                before = {k: v.clone() for k, v in w.state_dict().items()}
                torch.onnx.export(w, tuple(args), path, dynamo=False,
                                  training=torch.onnx.TrainingMode.TRAINING,
                                  do_constant_folding=False, opset_version=17,
                                  input_names=names, output_names=["loss", "logits"])
                with torch.no_grad():  # tracing ran a training-mode forward: undo BN updates
                    for k, v in w.state_dict().items():
                        v.copy_(before[k])
                info[exp] = {"exporter": "legacy (README recipe)", "param_prefix": "model."}
            elif exp == "dynamo_default":
                w = ReadmeWrapper(model, spec)
                w.train()
                before = {k: v.clone() for k, v in w.state_dict().items()}
                torch.onnx.export(w, tuple(args), dynamo=True, input_names=names,
                                  output_names=["loss", "logits"]).save(path)
                with torch.no_grad():
                    for k, v in w.state_dict().items():
                        v.copy_(before[k])
                info[exp] = {"exporter": "torch.onnx.export(dynamo=True) defaults (its ONNX "
                             "optimizer on), for comparison", "param_prefix": "model."}
            else:
                if spec["loss"] == "model":
                    ins = dict(zip(names, args))
                    r = apexc_torch.export(model, None, ins, path,
                                           exporter=exp.split("_")[1])
                else:
                    r = apexc_torch.export(model, lambda out, y: F.cross_entropy(out, y),
                                           {"x": args[0]}, path, targets={"labels": args[1]},
                                           exporter=exp.split("_")[1],
                                           output_names=["loss", "logits"])
                info[exp] = {"exporter": f"apexc_torch {exp.split('_')[1]}", "param_prefix": "",
                             "trainable": len(r["trainable"]), "constants_moved": r["constants"],
                             "bn_fixed": r["bn_fixed"], "unused": r["unused"]}
        info[exp]["bytes"] = os.path.getsize(path)
    return info


def exported_buffers(outdir, exp, model, info):
    """The export's initializers equal the model's initial parameters (else an error; for
    dynamo_default, whose optimizer rewrites parameters, they are counted in info). Returns
    the buffers whose exported value differs from the model's ({} normally): the README
    recipe's torch.onnx.export(training=TRAINING) runs one training-mode forward while tracing,
    which updates BatchNorm running statistics in the model, and the file holds those."""
    import onnx
    from onnx import numpy_helper
    params = {k: v.detach().numpy() for k, v in model.named_parameters()}
    buffers = {k: v.detach().numpy() for k, v in model.named_buffers()}
    mp = onnx.load(os.path.join(outdir, exp, "model.onnx"))
    moved, changed, seen = {}, [], set()
    prefix = info["param_prefix"]
    for t in mp.graph.initializer:
        n = t.name[len(prefix):] if prefix and t.name.startswith(prefix) else t.name
        a = numpy_helper.to_array(t)
        seen.add(n)
        if n in params and not np.array_equal(a, params[n]):
            if exp != "dynamo_default":
                raise SystemExit(f"{outdir}/{exp}: parameter {t.name} differs from the model")
            changed.append(n)
        if n in buffers and not np.array_equal(a, buffers[n]):
            moved[n] = a
    if exp == "dynamo_default":
        info["parameters_changed"] = changed
        info["parameters_missing"] = [n for n in params if n not in seen]
        info["other_initializers"] = len([t for t in mp.graph.initializer if
                                          (t.name[len(prefix):] if t.name.startswith(prefix)
                                           else t.name) not in params and
                                          (t.name[len(prefix):] if t.name.startswith(prefix)
                                           else t.name) not in buffers])
    return moved


def make(name, spec, out_root):
    torch.manual_seed(0)
    model = spec["build"]()
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    rng = np.random.default_rng(1234)
    b = spec["batch"]
    data = spec["data"](rng, BATCHES * b)
    evald = spec["data"](rng, b)
    outdir = os.path.join(out_root, name)
    if os.path.isdir(outdir):
        shutil.rmtree(outdir)
    for sub in ("data", "eval"):
        os.makedirs(os.path.join(outdir, sub))
    for n, a in data.items():
        np.save(os.path.join(outdir, "data", f"{n}.npy"), a)
    model_inputs = [n for n in spec["inputs"] if n != "labels"]
    for n in model_inputs:
        np.save(os.path.join(outdir, "eval", f"{n}.npy"), evald[n])

    info = export_all(name, spec, model, {n: a[:b] for n, a in data.items()}, outdir)
    model.load_state_dict(init_state)
    moved = {exp: exported_buffers(outdir, exp, model, info[exp]) for exp in EXPORTS}

    losses32, grads32, trained = train_reference(spec, model, data, torch.float32)
    ev = eval_outputs(spec, trained, [evald[n] for n in model_inputs])
    for exp, bufs in moved.items():
        if not bufs:
            continue
        # this export starts from other running statistics: its own eval reference (training
        # itself never reads them, so the losses are the same; checked)
        torch.manual_seed(0)
        m = spec["build"]()
        m.load_state_dict(init_state)
        with torch.no_grad():
            for k, v in m.named_buffers():
                if k in bufs:
                    v.copy_(torch.from_numpy(np.array(bufs[k])))
        l2, _, t2 = train_reference(spec, m, data, torch.float32)
        if l2 != losses32:
            raise SystemExit(f"{name}/{exp}: losses depend on the exported running statistics")
        np.savez(os.path.join(outdir, exp, "eval_outputs.npz"),
                 **eval_outputs(spec, t2, [evald[n] for n in model_inputs]))
        info[exp]["initial_buffers"] = (
            f"{len(bufs)} buffers hold the values after the export's own training-mode forward "
            "(torch.onnx.export(training=TRAINING) updates BatchNorm running statistics while "
            "tracing); eval reference: this folder's eval_outputs.npz")
    torch.manual_seed(0)
    m64 = spec["build"]()
    m64.load_state_dict(init_state)
    losses64, grads64, _ = train_reference(spec, m64, data, torch.float64)

    def fresh():
        torch.manual_seed(0)
        m = spec["build"]()
        m.load_state_dict(init_state)
        return m
    amp = amp_references(spec, fresh, data, losses32)

    np.savez(os.path.join(outdir, "grads.npz"), **grads32)
    np.savez(os.path.join(outdir, "grads64.npz"), **grads64)
    np.savez(os.path.join(outdir, "eval_outputs.npz"), **ev)
    drift = max(abs(a - c) / abs(c) for a, c in zip(losses32, losses64))
    drift5 = max(abs(a - c) / abs(c) for a, c in list(zip(losses32, losses64))[:5])
    ref = {
        "model": name,
        "steps": STEPS,
        "batch": b,
        "lr": spec["lr"],
        "optimizer": "sgd (momentum 0, weight decay 0)",
        "data_inputs": spec["inputs"] + spec["targets"],
        "eval_inputs": model_inputs,
        "eval_outputs": sorted(ev),
        "o0_reference": spec["o0_ref"],
        "note": spec["note"],
        "losses_fp32": losses32,
        "losses_fp64": losses64,
        "fp32_vs_fp64_max_rel": drift,
        "fp32_vs_fp64_max_rel_first5": drift5,
        **amp,
        "parameters": int(sum(p.numel() for p in model.parameters())),
        "exports": info,
        "versions": versions(),
    }
    with open(os.path.join(outdir, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(outdir) for fn in fns)
    print(f"{name}: {ref['parameters']} parameters, losses {losses32[0]:.4f} -> {losses32[-1]:.4f}, "
          f"fp32 vs fp64 max rel {drift:.2e} (first 5: {drift5:.2e}), {size / 1e6:.2f} MB")
    return size


def amp_only(name, spec, out_root):
    """Adds amp_fp16 / amp_bf16 to an existing MODEL/reference.json, nothing else."""
    path = os.path.join(out_root, name, "reference.json")
    with open(path) as f:
        ref = json.load(f)
    torch.manual_seed(0)
    model = spec["build"]()
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    data = spec["data"](np.random.default_rng(1234), BATCHES * spec["batch"])

    def fresh():
        torch.manual_seed(0)
        m = spec["build"]()
        m.load_state_dict(init_state)
        return m
    losses32, _, _ = train_reference(spec, fresh(), data, torch.float32)
    if losses32 != ref["losses_fp32"]:
        raise SystemExit(f"{name}: the rebuilt model does not reproduce reference.json's fp32 "
                         "losses (other versions?); regenerate the fixtures instead")
    ref.update(amp_references(spec, fresh, data, losses32))
    with open(path, "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")
    print(f"{name}: autocast fp16 vs fp32 max rel {ref['amp_fp16']['vs_fp32_max_rel']:.2e} "
          f"({ref['amp_fp16']['skipped']} skipped), bf16 {ref['amp_bf16']['vs_fp32_max_rel']:.2e}")


def versions():
    import onnx
    import onnxscript
    import torchvision
    import transformers
    return {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "transformers": transformers.__version__, "onnx": onnx.__version__,
            "onnxscript": onnxscript.__version__, "numpy": np.__version__,
            "python": platform.python_version()}


def main():
    ap = argparse.ArgumentParser(description="writes tests/models fixtures (needs torch)")
    ap.add_argument("models", nargs="*", help="default: all")
    ap.add_argument("--out", default=HERE)
    ap.add_argument("--amp-only", action="store_true",
                    help="only add PyTorch's autocast references to existing fixtures")
    a = ap.parse_args()
    torch.backends.mkldnn.enabled = False
    torch.use_deterministic_algorithms(True)
    models = _models()
    todo = a.models or list(models)
    total = 0
    for n in todo:
        if n not in models:
            raise SystemExit(f"make_models: no model '{n}' ({', '.join(models)})")
        if a.amp_only:
            amp_only(n, models[n], a.out)
            continue
        total += make(n, models[n], a.out)
    if a.amp_only:
        return
    print(f"total {total / 1e6:.2f} MB; versions {json.dumps(versions())}")


if __name__ == "__main__":
    main()
