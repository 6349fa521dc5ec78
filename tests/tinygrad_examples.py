"""Programs written the way tinygrad 0.8.0's own examples are, none of them the benchmark's models: a BERT-style encoder
(embeddings, attention with a padding mask, softmax, LayerNorm, GELU, a tanh pooler, log_softmax) in a TinyJit; a small
UNet (BatchNorm, GroupNorm, max and average pooling, nearest upsampling by expand, a transposed conv, skip concats, SiLU,
LeakyReLU, ELU, sigmoid); a training step of an MNIST-style convnet (tinygrad's beautiful_mnist: BatchNorm in training
mode, sparse categorical cross-entropy, backward, SGD with momentum) in a TinyJit; a LLaMA-style decoder (RMSNorm,
rotary embeddings, grouped KV heads, SwiGLU, a causal mask, a KV cache) decoding with a symbolic start_pos in a TinyJit;
a small transformer classifier trained by AdamW under a warmup-cosine learning-rate schedule in a TinyJit; two stacked
LSTM cells unrolled one TinyJit call a step, their state fed back; and a ViT's patch embedding (a strided conv, a class
token) and attention block. Each is a function of nothing returning one numpy array, the same on every call."""
import numpy as np
from tinygrad import Tensor, dtypes
from tinygrad.jit import TinyJit
from tinygrad.nn import BatchNorm2d, Conv2d, ConvTranspose2d, Embedding, GroupNorm, LayerNorm, Linear
from tinygrad.nn.optim import SGD, AdamW
from tinygrad.nn.state import get_parameters, get_state_dict
from tinygrad.shape.symbolic import Variable


class EncoderLayer:
  def __init__(self, dim, heads):
    self.qkv, self.out, self.ln1, self.ln2 = Linear(dim, 3 * dim), Linear(dim, dim), LayerNorm(dim), LayerNorm(dim)
    self.ff1, self.ff2, self.heads = Linear(dim, 4 * dim), Linear(4 * dim, dim), heads
  def __call__(self, x, mask):
    b, t, d = x.shape
    q, k, v = [y.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).chunk(3, dim=2)]
    att = (q @ k.transpose(-2, -1) / np.sqrt(d // self.heads) + mask).softmax(-1)
    x = self.ln1(x + self.out((att @ v).transpose(1, 2).reshape(b, t, d)))
    return self.ln2(x + self.ff2(self.ff1(x).gelu()))

class Bert:
  """BERT's layout at toy size: token and position embeddings, post-LayerNorm encoder layers, a pooled classifier."""
  def __init__(self, vocab=1000, dim=64, heads=4, layers=2, maxlen=32):
    self.tok, self.pos, self.ln = Embedding(vocab, dim), Embedding(maxlen, dim), LayerNorm(dim)
    self.layers, self.pool, self.cls = [EncoderLayer(dim, heads) for _ in range(layers)], Linear(dim, dim), Linear(dim, 2)
  def __call__(self, ids, attn):
    x = self.ln(self.tok(ids) + self.pos(Tensor.arange(ids.shape[1]).reshape(1, -1)))
    mask = (1 - attn.reshape(attn.shape[0], 1, 1, attn.shape[1])) * -10000.0
    for l in self.layers: x = l(x, mask)
    return self.cls(self.pool(x[:, 0]).tanh()).log_softmax()

def up2(x: Tensor) -> Tensor:
  """Nearest-neighbour upsampling by 2, as tinygrad 0.8.0 programs write it (it has no interpolate)."""
  b, c, h, w = x.shape
  return x.reshape(b, c, h, 1, w, 1).expand(b, c, h, 2, w, 2).reshape(b, c, h * 2, w * 2)

class UNet:
  def __init__(self, c=8):
    self.d1, self.b1 = Conv2d(3, c, 3, padding=1), BatchNorm2d(c)
    self.d2, self.g2 = Conv2d(c, 2 * c, 3, padding=1), GroupNorm(2, 2 * c)
    self.mid = Conv2d(2 * c, 2 * c, 3, padding=1)
    self.up = ConvTranspose2d(2 * c, c, 2, stride=2)
    self.u1 = Conv2d(4 * c, 2 * c, 3, padding=1)
    self.u0 = Conv2d(2 * c, c, 3, padding=1)
    self.head = Conv2d(c, 1, 1)
  def __call__(self, x):
    s1 = self.b1(self.d1(x)).relu()
    s2 = self.g2(self.d2(s1.max_pool2d())).silu()
    m = self.mid(s2.avg_pool2d()).leakyrelu()
    u = self.u1(up2(m).cat(s2, dim=1)).relu()
    u = self.u0(self.up(u).cat(s1, dim=1)).elu()
    return self.head(u).sigmoid()

class ConvNet:  # tinygrad's examples/beautiful_mnist.py's model
  def __init__(self):
    self.layers = [Conv2d(1, 8, 5), Tensor.relu, Conv2d(8, 8, 5), Tensor.relu, BatchNorm2d(8), Tensor.max_pool2d,
                   Conv2d(8, 16, 3), Tensor.relu, Conv2d(16, 16, 3), Tensor.relu, BatchNorm2d(16), Tensor.max_pool2d,
                   lambda x: x.flatten(1), Linear(144, 10)]
  def __call__(self, x): return x.sequential(self.layers)

def seeded(m, seed: int) -> None:
  """Random weights (BatchNorm's running variance positive), as a pretrained model's would be: never the init's zeros."""
  rng = np.random.default_rng(seed)
  for k, t in get_state_dict(m).items():
    if "num_batches" in k or k == "rope": continue  # a counter, a table of cos and sin: no weights
    val = np.abs(rng.standard_normal(t.shape)) + 0.5 if "running_var" in k else rng.standard_normal(t.shape) * 0.3
    t.assign(Tensor(val.astype(t.dtype.np))).realize()

def bert() -> np.ndarray:
  """Two sequences of 32 tokens, the second padded after 20: class log-probabilities, from the JIT's replay."""
  rng, m = np.random.default_rng(1), Bert()
  seeded(m, 2)
  ids, attn = Tensor(rng.integers(0, 1000, (2, 32)).astype(np.int32)), Tensor((np.arange(32) < np.array([[32], [20]])).astype(np.float32))
  f = TinyJit(lambda i, a: m(i, a).realize())
  return [f(ids, attn).numpy() for _ in range(3)][-1]  # run, capture, replay

def unet() -> np.ndarray:
  rng, m = np.random.default_rng(1), UNet()
  seeded(m, 3)
  return m(Tensor(rng.standard_normal((1, 3, 32, 32)).astype(np.float32))).numpy()

def fit(m, opt, X: np.ndarray, Y: np.ndarray, steps: int, sched=None) -> np.ndarray:
  """`steps` training steps on one batch in a TinyJit (run, capture, then replays), the schedule stepped after each
  optimizer step: the losses."""
  @TinyJit
  def step(x, y):
    with Tensor.train():
      opt.zero_grad()
      loss = m(x).sparse_categorical_crossentropy(y).backward()
      opt.step()
      if sched: sched.step()
      return loss.realize()
  return np.array([step(Tensor(X), Tensor(Y)).numpy() for _ in range(steps)]).ravel()

def train() -> np.ndarray:
  """Three steps on one batch of 16: the losses, then the last layer's weights."""
  rng, m = np.random.default_rng(1), ConvNet()
  seeded(m, 4)
  X, Y = rng.standard_normal((16, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, (16,)).astype(np.int32)
  opt = SGD(get_parameters(m), lr=0.01, momentum=0.9)  # Adam's g/sqrt(v) is sign(g) at step one: a 1-ulp change flips a weight
  return np.concatenate([fit(m, opt, X, Y, 3), m.layers[-1].weight.numpy().ravel()])




def rope_table(head_dim: int, end: int, theta=10000.0) -> Tensor:
  """cos and sin of every position times each frequency pair, (1, end, 1, head_dim//2, 2), realized once as LLaMA's is."""
  freqs = 1.0 / (theta ** (Tensor.arange(0, head_dim, 2) / head_dim))
  angles = Tensor.arange(end).unsqueeze(1) * freqs.unsqueeze(0)
  return Tensor.stack([angles.cos(), angles.sin()], dim=-1).reshape(1, end, 1, head_dim // 2, 2).realize()

def rotate(x: Tensor, rope: Tensor) -> Tensor:
  """x's pairs (re, im) times the positions' (cos, sin): the complex product written on a trailing axis of 2."""
  x = x.reshape(*x.shape[:-1], -1, 2)
  a, b, c, s = x[..., 0:1], x[..., 1:2], rope[..., 0:1], rope[..., 1:2]
  return (a * c - b * s).cat(a * s + b * c, dim=-1).flatten(3)

class RMSNorm:
  def __init__(self, dim, eps=1e-5): self.eps, self.weight = eps, Tensor.ones(dim)
  def __call__(self, x): return x * (x.square().mean(-1, keepdim=True) + self.eps).rsqrt() * self.weight

class Attention:
  def __init__(self, dim, heads, kv_heads, max_context):
    self.heads, self.kv_heads, self.head_dim, self.max_context = heads, kv_heads, dim // heads, max_context
    self.wq, self.wo = Linear(dim, dim, bias=False), Linear(dim, dim, bias=False)
    self.wk, self.wv = Linear(dim, kv_heads * self.head_dim, bias=False), Linear(dim, kv_heads * self.head_dim, bias=False)
  def __call__(self, x, start_pos, rope, mask):
    b, t, _ = x.shape
    q = rotate(self.wq(x).reshape(b, t, self.heads, self.head_dim), rope)
    k = rotate(self.wk(x).reshape(b, t, self.kv_heads, self.head_dim), rope)
    v = self.wv(x).reshape(b, t, self.kv_heads, self.head_dim)
    if not hasattr(self, "cache_k"):
      self.cache_k, self.cache_v = [Tensor.zeros(b, self.max_context, self.kv_heads, self.head_dim).contiguous().realize() for _ in range(2)]
    if isinstance(start_pos, Variable):  # while decoding: the cache's first start_pos rows, a symbolic shrink
      past = (None, (0, start_pos), None, None)
      k, v = self.cache_k.shrink(past).cat(k, dim=1), self.cache_v.shrink(past).cat(v, dim=1)
    pad = (None, (0, self.max_context - start_pos - t), None, None)
    self.cache_k.assign(k.pad(pad).contiguous()).realize()
    self.cache_v.assign(v.pad(pad).contiguous()).realize()
    rep = self.heads // self.kv_heads  # grouped KV heads: each serves rep query heads
    k, v = [y.reshape(b, y.shape[1], self.kv_heads, 1, self.head_dim).expand(b, y.shape[1], self.kv_heads, rep, self.head_dim)
            .reshape(b, y.shape[1], self.heads, self.head_dim).transpose(1, 2) for y in (k, v)]
    out = q.transpose(1, 2).scaled_dot_product_attention(k, v, mask)
    return self.wo(out.transpose(1, 2).reshape(b, t, -1))

class DecoderBlock:
  def __init__(self, dim, heads, kv_heads, hidden, max_context):
    self.attn, self.attn_norm, self.ffn_norm = Attention(dim, heads, kv_heads, max_context), RMSNorm(dim), RMSNorm(dim)
    self.w1, self.w2, self.w3 = Linear(dim, hidden, bias=False), Linear(hidden, dim, bias=False), Linear(dim, hidden, bias=False)
  def __call__(self, x, start_pos, rope, mask):
    h = x + self.attn(self.attn_norm(x), start_pos, rope, mask)
    y = self.ffn_norm(h)
    return h + self.w2(self.w1(y).silu() * self.w3(y))  # SwiGLU

class Llama:
  """LLaMA's decoder at toy size, as tinygrad's examples/llama.py runs it: the prompt at start_pos 0 with a causal mask,
  then one token a step with start_pos a bound Variable in a TinyJit (symbolic views of the KV cache and the rope table)."""
  def __init__(self, vocab=64, dim=32, heads=4, kv_heads=2, hidden=64, layers=1, max_context=16):
    self.tok, self.norm, self.out = Embedding(vocab, dim), RMSNorm(dim), Linear(dim, vocab, bias=False)
    self.layers, self.max_context = [DecoderBlock(dim, heads, kv_heads, hidden, max_context) for _ in range(layers)], max_context
    self.rope = rope_table(dim // heads, max_context)
    self.step = TinyJit(self.forward)
  def forward(self, tokens, start_pos):
    t = tokens.shape[1]
    rope = self.rope.shrink((None, (start_pos, start_pos + t), None, None, None))
    mask = Tensor.full((1, 1, t, t), float("-inf")).triu(1).realize() if t > 1 else None
    h = self.tok(tokens)
    for l in self.layers: h = l(h, start_pos, rope, mask)
    return self.out(self.norm(h))[:, -1].realize()
  def __call__(self, tokens, start_pos: int):
    if tokens.shape[1] > 1: return self.forward(tokens, start_pos)
    return self.step(tokens, Variable("start_pos", 1, self.max_context - 1).bind(start_pos))

def llama(dtype=dtypes.float32) -> np.ndarray:
  """A 5-token prompt, then 4 decoding steps fed fixed tokens (greedy sampling would turn a near tie into another token): the
  logits of every step; the JIT runs, captures, then replays the symbolic step. `dtype` is the model's float (its
  weights, cache and activations), as a HALF=1 example sets tinygrad's default float."""
  default, dtypes.default_float = dtypes.default_float, dtype
  try:
    rng, m = np.random.default_rng(1), Llama()
    seeded(m, 5)
    toks = rng.integers(0, 64, 9).astype(np.int32)
    logits = [m(Tensor(toks[None, :5]), 0).numpy()]
    logits += [m(Tensor(toks[None, p:p + 1]), p).numpy() for p in range(5, 9)]
  finally: dtypes.default_float = default
  return np.concatenate(logits).ravel()

class CosineWarmup:
  """A learning-rate schedule as tinygrad's extra/lr_scheduler.py writes one: a step counter Tensor and the optimizer's
  lr Tensor assigned from it (at the start and after each step), so a TinyJit replays the schedule: a linear warmup to
  the peak, then a cosine decay to 0 at `total` steps."""
  def __init__(self, opt, peak: float, warmup: int, total: int):
    self.opt, self.peak, self.warmup, self.total, self.t = opt, peak, warmup, total, Tensor([0.0], requires_grad=False).contiguous()
    self.opt.lr.assign(self.lr()).realize()
  def lr(self) -> Tensor:
    decay = 0.5 * (1 + ((self.t - self.warmup) / (self.total - self.warmup) * np.pi).cos())
    return (self.t < self.warmup).where((self.t + 1) / self.warmup, decay) * self.peak
  def step(self) -> None:
    self.t.assign(self.t + 1).realize()
    self.opt.lr.assign(self.lr()).realize()

class Classifier:
  """A one-layer pre-LayerNorm transformer block over token sequences, mean-pooled to classes. Its attention projections have no
  bias (a key's bias shifts a softmax row uniformly, so its gradient is rounding noise, which Adam's g/sqrt(v) blows up),
nor, as LLaMA's, its feed-forward layers (fewer kernels to build)."""
  def __init__(self, vocab=32, dim=32, heads=4, maxlen=8, classes=4):
    self.tok, self.pos, self.ln1, self.ln2 = Embedding(vocab, dim), Embedding(maxlen, dim), LayerNorm(dim), LayerNorm(dim)
    self.qkv, self.o, self.heads = Linear(dim, 3 * dim, bias=False), Linear(dim, dim, bias=False), heads
    self.ff1, self.ff2, self.head = Linear(dim, 2 * dim, bias=False), Linear(2 * dim, dim, bias=False), Linear(dim, classes)
  def __call__(self, ids):
    b, t = ids.shape
    x = self.tok(ids) + self.pos(Tensor.arange(t).reshape(1, t))
    q, k, v = [y.reshape(b, t, self.heads, -1).transpose(1, 2) for y in self.qkv(self.ln1(x)).chunk(3, dim=2)]
    x = x + self.o(q.scaled_dot_product_attention(k, v).transpose(1, 2).reshape(b, t, -1))
    x = x + self.ff2(self.ff1(self.ln2(x)).gelu())
    return self.head(x.mean(1))

def adamw_train() -> np.ndarray:
  """Five AdamW steps on one batch with the schedule (bias corrections: pow of the step count; sqrt; division): the
  losses, then the classifier's weights."""
  rng, m = np.random.default_rng(1), Classifier()
  seeded(m, 6)
  X, Y = rng.integers(0, 32, (8, 8)).astype(np.int32), rng.integers(0, 4, (8,)).astype(np.int32)
  opt = AdamW(get_parameters(m), lr=0.0, wd=0.01)
  losses = fit(m, opt, X, Y, 5, CosineWarmup(opt, peak=3e-3, warmup=2, total=5))
  return np.concatenate([losses, m.head.weight.numpy().ravel()])

class LSTMCell:
  """tinygrad's extra/models/rnnt.py's cell: one matmul pair for the four gates, h and c stacked in one realized Tensor."""
  def __init__(self, inp, hidden):
    k = hidden ** -0.5
    self.w_ih, self.w_hh = Tensor.uniform(4 * hidden, inp, low=-k, high=k), Tensor.uniform(4 * hidden, hidden, low=-k, high=k)
    self.b_ih, self.b_hh = Tensor.uniform(4 * hidden, low=-k, high=k), Tensor.uniform(4 * hidden, low=-k, high=k)
  def __call__(self, x, hc):
    b = x.shape[0]
    i, f, g, o = (x.linear(self.w_ih.T, self.b_ih) + hc[:b].linear(self.w_hh.T, self.b_hh)).chunk(4, 1)
    c = f.sigmoid() * hc[b:] + i.sigmoid() * g.tanh()
    return Tensor.cat(o.sigmoid() * c.tanh(), c).realize()

def lstm() -> np.ndarray:
  """Two stacked cells unrolled over 6 steps of a batch of 3, each step one TinyJit call (run, capture, replays): every
  step's top hidden state."""
  rng, cells = np.random.default_rng(1), [LSTMCell(10, 16), LSTMCell(16, 16)]
  for k, c in enumerate(cells): seeded(c, 7 + k)
  @TinyJit
  def step(x, hc0, hc1):
    hc0 = cells[0](x, hc0)
    return hc0, cells[1](hc0[:3], hc1)
  hc0, hc1 = [Tensor.zeros(6, 16).contiguous().realize() for _ in range(2)]
  out = []
  for x in rng.standard_normal((6, 3, 10)).astype(np.float32):
    hc0, hc1 = step(Tensor(x), hc0, hc1)
    out.append(hc1[:3].numpy())
  return np.concatenate(out).ravel()

class ViT:
  """A vision transformer's front at toy size: patches by a strided conv, a class token, learned positions, one
  pre-LayerNorm block with multi-head attention and a GELU MLP, the class token's logits."""
  def __init__(self, patch=4, dim=32, heads=4, size=16, classes=10):
    n = (size // patch) ** 2 + 1
    self.embed, self.cls, self.pos = Conv2d(3, dim, patch, stride=patch), Tensor.zeros(1, 1, dim), Tensor.zeros(1, n, dim)
    self.ln1, self.ln2, self.norm = LayerNorm(dim), LayerNorm(dim), LayerNorm(dim)
    self.qkv, self.proj, self.heads = Linear(dim, 3 * dim), Linear(dim, dim), heads
    self.fc1, self.fc2, self.head = Linear(dim, 4 * dim), Linear(4 * dim, dim), Linear(dim, classes)
  def __call__(self, img):
    b = img.shape[0]
    x = self.embed(img).flatten(2).transpose(1, 2)
    x = self.cls.expand(b, 1, x.shape[2]).cat(x, dim=1) + self.pos
    t, d = x.shape[1], x.shape[2]
    q, k, v = self.qkv(self.ln1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
    x = x + self.proj(q.scaled_dot_product_attention(k, v).transpose(1, 2).reshape(b, t, d))
    x = x + self.fc2(self.fc1(self.ln2(x)).gelu())
    return self.head(self.norm(x)[:, 0])

def vit() -> np.ndarray:
  rng, m = np.random.default_rng(1), ViT()
  seeded(m, 9)
  return m(Tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32))).numpy()

PROGRAMS = {"bert_encoder": bert, "unet": unet, "mnist_train_step": train, "llama_decode": llama, "adamw_train_step": adamw_train,
            "lstm_unrolled": lstm, "vit": vit}
