"""The torch side of bench/tinygrad_models.py: the same architectures in torch 2.13 eager on the CPU, on the weights and
inputs the parent saved (tinygrad's state-dict names). Runs in the tinygrad-tests venv (torch is no tunesvc dependency).
Protocol: argv = MODEL LAYERS NPZ; one line "run" on stdin -> one inference, its seconds on stdout; "out PATH" writes the
outputs of the last inference (npz) and exits."""
import sys, time
import numpy as np
import torch
import torch.nn.functional as F

torch.set_grad_enabled(False)
name, layers, W = sys.argv[1], int(sys.argv[2]), {k: torch.from_numpy(v) for k, v in np.load(sys.argv[3]).items()}
bn = lambda x, p: F.batch_norm(x, W[p + ".running_mean"], W[p + ".running_var"], W[p + ".weight"], W[p + ".bias"], False, 0.0, 1e-5)
lin = lambda x, p: F.linear(x, W[p + ".weight"], W.get(p + ".bias"))
ln = lambda x, p: F.layer_norm(x, x.shape[-1:], W[p + ".weight"], W[p + ".bias"], 1e-5)

def resnet():
  x = F.max_pool2d(F.relu(bn(F.conv2d(W["x"], W["conv1.weight"], stride=2, padding=3), "bn1")), 3, 2, padding=1)
  i = 0
  while f"blocks.{i}.conv1.weight" in W:
    p = f"blocks.{i}"
    stride = int(W[p + ".stride"])
    out = F.relu(bn(F.conv2d(x, W[p + ".conv1.weight"]), p + ".bn1"))
    out = F.relu(bn(F.conv2d(out, W[p + ".conv2.weight"], stride=stride, padding=1), p + ".bn2"))
    out = bn(F.conv2d(out, W[p + ".conv3.weight"]), p + ".bn3")
    short = bn(F.conv2d(x, W[p + ".down.0.weight"], stride=stride), p + ".down.1") if p + ".down.0.weight" in W else x
    x, i = F.relu(out + short), i + 1
  return [F.softmax(lin(x.mean((2, 3)), "fc"), -1)]

def mlp():
  x, i = W["x"], 0
  while f"fcs.{i}.weight" in W: x, i = F.relu(lin(x, f"fcs.{i}")), i + 1
  return [F.softmax(x, -1)]

def gpt2():
  heads, outs, cache = 12, [], {}
  for tokens, start in ((W["prompt"].long(), 0), (W["next"].long(), W["prompt"].shape[1])):
    n = tokens.shape[1]
    x = W["wte.weight"][tokens] + W["wpe.weight"][start:start + n][None]
    for i in range(layers):
      p = f"h.{i}"
      q, k, v = (t.reshape(1, n, heads, -1) for t in lin(ln(x, p + ".ln_1"), p + ".attn.c_attn").chunk(3, dim=2))
      if start: k, v = torch.cat([cache[i][0], k], 1), torch.cat([cache[i][1], v], 1)
      cache[i] = (k, v)
      a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=n > 1)
      h = x + lin(a.transpose(1, 2).reshape(1, n, -1), p + ".attn.c_proj")
      x = h + lin(F.gelu(lin(ln(h, p + ".ln_2"), p + ".c_fc"), approximate="tanh"), p + ".c_proj")
    outs.append(F.softmax(lin(ln(x, "ln_f"), "lm_head")[:, -1, :], -1))
  return outs

fn, last = {"resnet": resnet, "mlp": mlp, "gpt2": gpt2}[name], None
for line in sys.stdin:
  if line.startswith("out "):
    np.savez(line.split(" ", 1)[1].strip(), *[o.numpy() for o in last])
    break
  st = time.perf_counter()
  last = fn()
  print(time.perf_counter() - st, flush=True)
