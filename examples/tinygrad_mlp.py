"""A tinygrad 0.8.0 program as tinygrad's examples write one (nothing of tunesvc in it): a two-layer MLP with random
weights, batch 1, three inferences. The README runs it on tunesvc."""
import numpy as np
from tinygrad import Tensor
from tinygrad.nn import Linear

rng, _ = np.random.default_rng(0), Tensor.manual_seed(0)
l1, l2 = Linear(256, 512), Linear(512, 10)
x = Tensor(rng.standard_normal((1, 256)).astype(np.float32))
for _ in range(3): probs = l2(l1(x).relu()).softmax().numpy()
print("class", int(probs.argmax()), "p", float(probs.max()))
