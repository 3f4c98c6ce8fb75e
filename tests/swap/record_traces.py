#!/usr/bin/env python3
"""record_traces: real models' tensor access traces for host swap.

Runs real PyTorch models on the CPU for a few iterations and writes, for
every operator, the tensor storages it reads and writes, in the swap trace
format of core/swap/swap_trace.h (docs/swap.md):

    A <block> <bytes> <r|w>    one access of the current operator
    L                          the operator is complete (one launch)
    F <block>                  the storage died
    I                          one iteration (training step, eval pass...)

How it sees the accesses: a TorchDispatchMode (torch.utils._python_dispatch)
receives every aten operator with its inputs and outputs, forward, backward
(autograd runs CPU backward on the calling thread, under the mode) and the
optimizer step alike. Inputs are reads; outputs, and arguments the schema
marks as mutated (in-place and out= operators), are writes. Operators that
move no data (views, empty*, detach, ...) are not launches.

Blocks: one per tensor storage (storages, not tensors: views share theirs).
A storage is seen when an operator first touches it and dies when its
StorageImpl does (torch.multiprocessing.reductions.StorageWeakRef: a weak
reference to the C++ storage, not to a Python wrapper that may die first;
checked before every operator, so the F line comes before the next access).
Block ids are given as a caching allocator (PyTorch's CUDA one) would give
addresses: a new storage takes the lowest freed id of the same size (the
caching allocator's best fit orders free blocks by size, then address),
else a fresh one. So a training loop reuses the same ids in the same
roles every iteration, as the shim sees it on a GPU, instead of depending on
where glibc's malloc happens to put CPU tensors. Storages smaller than
--min-bytes (default 64 KiB) are left out: the shim only swaps large blocks
(IPCSHIM_SWAP_MIN_BYTES) and small ones only add lines.

Usage:
    record_traces.py --out DIR [--only NAME...] [--iters N] [--check]
    record_traces.py --list
Writes DIR/NAME.trace.xz per trace. The committed traces in
tests/swap/traces/ are regenerated with exactly
    python3 tests/swap/record_traces.py --out tests/swap/traces
and need python3-torch and python3-torchvision (Debian: apt-get install -y
python3-torch python3-torchvision). Everything is seeded: the same PyTorch
version writes the same traces.
"""
import argparse
import heapq
import lzma
import os
import sys


def _import_torch():
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return None, str(e)
    return torch, None


torch, TORCH_ERR = _import_torch()

# Operators that move no data: metadata, views, allocation without content.
NO_DATA = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "detach", "alias",
    "view", "_unsafe_view", "reshape", "expand", "t", "transpose", "permute", "squeeze",
    "unsqueeze", "as_strided", "slice", "select", "split", "split_with_sizes", "chunk", "unbind",
    "narrow", "view_as", "_reshape_alias", "unfold", "diagonal", "lift_fresh", "numpy_T",
    "_local_scalar_dense", "is_same_size", "sym_size", "sym_stride", "sym_numel",
}


class Recorder:
    """Writes trace lines; tracks storage lifetimes and allocator-style ids."""

    def __init__(self, out, min_bytes):
        from torch.multiprocessing.reductions import StorageWeakRef

        self.weakref = StorageWeakRef
        self.out = out
        self.min_bytes = min_bytes
        self.live = {}  # data_ptr -> (block id, StorageWeakRef, nbytes)
        self.free_ids = {}  # nbytes -> heap of freed ids
        self.next_id = 1
        self.launches = 0
        self.names = False  # --names: the operator after each L, for reading

    def reap(self):
        """Emit F for every storage that died since the last operator."""
        dead = [p for p, (_, w, _) in self.live.items() if w.expired()]
        for p in dead:
            bid, _, n = self.live.pop(p)
            self.out.write("F %d\n" % bid)
            heapq.heappush(self.free_ids.setdefault(n, []), bid)

    def block(self, t):
        """(id, bytes) of tensor t's storage, None for one left out."""
        try:
            s = t.storage()
        except (NotImplementedError, RuntimeError):
            return None
        s = getattr(s, "_untyped", None) and s._untyped() or getattr(s, "untyped", lambda: s)()
        n = s.nbytes()
        if n < self.min_bytes or n == 0:
            return None
        p = s.data_ptr()
        have = self.live.get(p)
        if have and have[2] == n and not have[1].expired():
            return have[0], n
        if have:  # a dead storage's address, or a resize: the old block is gone
            self.out.write("F %d\n" % have[0])
            heapq.heappush(self.free_ids.setdefault(have[2], []), have[0])
        ids = self.free_ids.get(n)
        bid = heapq.heappop(ids) if ids else None
        if bid is None:
            bid = self.next_id
            self.next_id += 1
        self.live[p] = (bid, self.weakref(s), n)
        return bid, n

    def launch(self, reads, writes, name):
        seen = {}
        for t in reads:
            b = self.block(t)
            if b and b[0] not in seen:
                seen[b[0]] = [b[1], False]
        for t in writes:
            b = self.block(t)
            if b:
                seen.setdefault(b[0], [b[1], True])[1] = True
        if not seen:
            return
        for bid, (n, w) in seen.items():
            self.out.write("A %d %d %s\n" % (bid, n, "w" if w else "r"))
        self.out.write("L # %s\n" % name if self.names else "L\n")
        self.launches += 1

    def iteration(self):
        self.reap()
        self.out.write("I\n")


def make_mode(rec):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    def tensors(x):
        return [a for a in tree_flatten(x)[0] if isinstance(a, torch.Tensor)]

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func.__name__.split(".")[0] if hasattr(func, "__name__") else str(func)
            schema = func._schema
            if name in NO_DATA:
                return out
            rec.reap()
            reads, writes = [], []
            flat = list(args) + [kwargs.get(a.name) for a in schema.arguments[len(args):]]
            for arg, val in zip(schema.arguments, flat):
                ts = tensors(val)
                info = arg.alias_info
                if info is not None and info.is_write:
                    writes += ts
                else:
                    reads += ts
            # Views of an input are not writes of new data.
            if all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns):
                return out
            writes += [t for t in tensors(out)]
            rec.launch(reads, writes, name)
            return out

    return Mode()


# ---- the models -------------------------------------------------------------


def resnet(batch=8, res=112):
    import torchvision

    m = torchvision.models.resnet18(num_classes=100)
    x = torch.randn(batch, 3, res, res)
    y = torch.randint(0, 100, (batch,))
    return m, lambda: (x, y), torch.nn.CrossEntropyLoss()


class Encoder(torch.nn.Module if torch else object):
    def __init__(self, d=512, heads=8, ff=2048, layers=4, vocab=1000):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, batch_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, layers)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.enc(self.emb(x)))


def transformer(batch=4, seq=64, d=512, layers=4):
    m = Encoder(d=d, layers=layers)
    x = torch.randint(0, 1000, (batch, seq))
    y = torch.randint(0, 1000, (batch, seq))
    lossf = torch.nn.CrossEntropyLoss()
    return m, lambda: (x, y), lambda out, y: lossf(out.reshape(-1, 1000), y.reshape(-1))


class LSTMLM(torch.nn.Module if torch else object):
    def __init__(self, vocab=1000, d=256, hidden=512, layers=2):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.rnn = torch.nn.LSTM(d, hidden, layers, batch_first=True)
        self.head = torch.nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.head(self.rnn(self.emb(x))[0])


def lstm(batch=8, seq=16):
    m = LSTMLM()
    x = torch.randint(0, 1000, (batch, seq))
    y = torch.randint(0, 1000, (batch, seq))
    lossf = torch.nn.CrossEntropyLoss()
    return m, lambda: (x, y), lambda out, y: lossf(out.reshape(-1, 1000), y.reshape(-1))


class MoE(torch.nn.Module if torch else object):
    """Top-1 routed mixture of experts: which experts run, and on how many
    tokens, depends on the data (a fresh batch every step)."""

    def __init__(self, d=256, ff=1024, experts=8, layers=2, vocab=1000):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.gates = torch.nn.ModuleList(torch.nn.Linear(d, experts) for _ in range(layers))
        self.experts = torch.nn.ModuleList(
            torch.nn.ModuleList(
                torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.GELU(), torch.nn.Linear(ff, d))
                for _ in range(experts)) for _ in range(layers))
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, x):
        h = self.emb(x).reshape(-1, self.emb.embedding_dim)
        for gate, experts in zip(self.gates, self.experts):
            choice = gate(h).argmax(dim=-1)
            out = torch.zeros_like(h)
            for e, ex in enumerate(experts):
                idx = (choice == e).nonzero().squeeze(-1)
                if idx.numel():
                    out = out.index_add(0, idx, ex(h[idx]))
            h = h + out
        return self.head(h)


def moe(batch=8, seq=32):
    m = MoE()
    g = torch.Generator().manual_seed(1)
    lossf = torch.nn.CrossEntropyLoss()

    def data():
        x = torch.randint(0, 1000, (batch, seq), generator=g)
        return x, torch.randint(0, 1000, (batch * seq,), generator=g)

    return m, data, lossf


class Seq2Seq(torch.nn.Module if torch else object):
    """Attention seq2seq RNN: a bidirectional GRU encoder and a GRU decoder
    with Luong-style attention over the encoder's outputs, trained with
    teacher forcing. The decoder is a Python loop over the target, whose
    length differs from batch to batch (an inner loop that varies in count)."""

    def __init__(self, vocab=4000, d=256, hidden=512):
        super().__init__()
        self.vocab = vocab
        self.src_emb = torch.nn.Embedding(vocab, d)
        self.tgt_emb = torch.nn.Embedding(vocab, d)
        self.enc = torch.nn.GRU(d, hidden, batch_first=True, bidirectional=True)
        self.bridge = torch.nn.Linear(2 * hidden, hidden)
        self.keys = torch.nn.Linear(2 * hidden, hidden)
        self.cell = torch.nn.GRUCell(d + 2 * hidden, hidden)
        self.out = torch.nn.Linear(hidden + 2 * hidden, vocab)

    def forward(self, batch):
        src, tgt_in = batch
        enc, _ = self.enc(self.src_emb(src))  # (B, S, 2H)
        keys = self.keys(enc)  # (B, S, H)
        h = torch.tanh(self.bridge(enc.mean(dim=1)))
        emb = self.tgt_emb(tgt_in)
        logits = []
        for t in range(tgt_in.shape[1]):
            score = torch.bmm(keys, h.unsqueeze(2))  # (B, S, 1)
            attn = torch.softmax(score, dim=1)
            ctx = torch.bmm(attn.transpose(1, 2), enc).squeeze(1)  # (B, 2H)
            h = self.cell(torch.cat([emb[:, t], ctx], dim=1), h)
            logits.append(self.out(torch.cat([h, ctx], dim=1)))
        return torch.stack(logits, dim=1)


def seq2seq(batch=32, src=24, tgt=(10, 16)):
    m = Seq2Seq()
    g = torch.Generator().manual_seed(2)
    lossf = torch.nn.CrossEntropyLoss()

    def data():
        n = int(torch.randint(tgt[0], tgt[1] + 1, (1,), generator=g))
        x = torch.randint(0, m.vocab, (batch, src), generator=g)
        y = torch.randint(0, m.vocab, (batch, n + 1), generator=g)
        return (x, y[:, :-1]), y[:, 1:]

    return m, data, lambda out, y: lossf(out.reshape(-1, m.vocab), y.reshape(-1))


class UNet(torch.nn.Module if torch else object):
    """A small U-Net for segmentation: four levels (32-256 channels), two
    3x3 conv + batch norm + ReLU per level, max-pool down, transposed conv
    up, skip connections concatenated."""

    def __init__(self, cin=3, classes=4, widths=(32, 64, 128, 256)):
        super().__init__()

        def block(a, b):
            return torch.nn.Sequential(
                torch.nn.Conv2d(a, b, 3, padding=1), torch.nn.BatchNorm2d(b), torch.nn.ReLU(),
                torch.nn.Conv2d(b, b, 3, padding=1), torch.nn.BatchNorm2d(b), torch.nn.ReLU())

        self.down = torch.nn.ModuleList()
        a = cin
        for w in widths:
            self.down.append(block(a, w))
            a = w
        self.ups = torch.nn.ModuleList(
            torch.nn.ConvTranspose2d(w, w // 2, 2, stride=2) for w in reversed(widths[1:]))
        self.up = torch.nn.ModuleList(block(w, w // 2) for w in reversed(widths[1:]))
        self.head = torch.nn.Conv2d(widths[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, blk in enumerate(self.down):
            x = blk(x)
            if i + 1 < len(self.down):
                skips.append(x)
                x = torch.nn.functional.max_pool2d(x, 2)
        for up, blk in zip(self.ups, self.up):
            x = blk(torch.cat([up(x), skips.pop()], dim=1))
        return self.head(x)


def unet(batch=4, res=96, classes=4):
    m = UNet(classes=classes)
    x = torch.randn(batch, 3, res, res)
    y = torch.randint(0, classes, (batch, res, res))
    return m, lambda: (x, y), torch.nn.CrossEntropyLoss()


class Decoder(torch.nn.Module if torch else object):
    """A small GPT-style transformer decoder (pre-norm, causal attention)
    whose attention keeps a per-layer key/value cache that grows by one
    position per generated token (torch.cat, as a dynamic KV cache does)."""

    def __init__(self, vocab=4000, d=512, heads=8, layers=4, ff=2048, ctx=128):
        super().__init__()
        self.vocab, self.heads = vocab, heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(ctx, d)
        self.ln1 = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(layers))
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(d, 3 * d) for _ in range(layers))
        self.proj = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(layers))
        self.ln2 = torch.nn.ModuleList(torch.nn.LayerNorm(d) for _ in range(layers))
        self.mlp = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.Linear(d, ff), torch.nn.GELU(), torch.nn.Linear(ff, d))
            for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(d)
        self.head = torch.nn.Linear(d, vocab)

    def forward(self, tokens, start, cache):
        b, n = tokens.shape
        x = self.emb(tokens) + self.pos(torch.arange(start, start + n))
        for i in range(len(self.qkv)):
            q, k, v = self.qkv[i](self.ln1[i](x)).view(b, n, 3, self.heads, -1).permute(
                2, 0, 3, 1, 4)
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            att = q @ k.transpose(-2, -1) / (k.shape[-1] ** 0.5)
            if n > 1:
                att = att.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            y = (torch.softmax(att, dim=-1) @ v).transpose(1, 2).reshape(b, n, -1)
            x = x + self.proj[i](y)
            x = x + self.mlp[i](self.ln2[i](x))
        return self.head(self.lnf(x[:, -1]))


def decoder(batch=8, prompt=32, new=32):
    m = Decoder()
    g = torch.Generator().manual_seed(3)

    def data():
        return torch.randint(0, m.vocab, (batch, prompt), generator=g), new

    return m, data, None


def generate(m, data):
    """One request batch: prefill the prompt, then greedy decoding of `new`
    tokens one at a time against the growing KV cache."""
    prompt, new = data()
    cache = [None] * len(m.qkv)
    with torch.no_grad():
        logits = m(prompt, 0, cache)
        pos = prompt.shape[1]
        for _ in range(new):
            tok = logits.argmax(dim=-1, keepdim=True)
            logits = m(tok, pos, cache)
            pos += 1


def transformer_varlen(batch=4, d=512, layers=4, lengths=(32, 48, 64, 80)):
    """The encoder of `transformer`, fed batches padded to the bucket of
    their length (dynamic padding): the sequence length, so the size of
    every activation, is drawn per batch from `lengths`."""
    m = Encoder(d=d, layers=layers)
    g = torch.Generator().manual_seed(4)
    lossf = torch.nn.CrossEntropyLoss()

    def data():
        n = lengths[int(torch.randint(0, len(lengths), (1,), generator=g))]
        return (torch.randint(0, 1000, (batch, n), generator=g),
                torch.randint(0, 1000, (batch, n), generator=g))

    return m, data, lambda out, y: lossf(out.reshape(-1, 1000), y.reshape(-1))


class Generator(torch.nn.Module if torch else object):
    """DCGAN generator: a 128-vector to a 3x32x32 image (4x4 -> 32x32)."""

    def __init__(self, z=128, w=128):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.ConvTranspose2d(z, 4 * w, 4, 1, 0), torch.nn.BatchNorm2d(4 * w),
            torch.nn.ReLU(), torch.nn.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1),
            torch.nn.BatchNorm2d(2 * w), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(2 * w, w, 4, 2, 1), torch.nn.BatchNorm2d(w), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(w, 3, 4, 2, 1), torch.nn.Tanh())

    def forward(self, x):
        return self.net(x)


class Critic(torch.nn.Module if torch else object):
    """DCGAN discriminator: a 3x32x32 image to one logit."""

    def __init__(self, w=128):
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Conv2d(3, w, 4, 2, 1), torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(w, 2 * w, 4, 2, 1), torch.nn.BatchNorm2d(2 * w),
            torch.nn.LeakyReLU(0.2), torch.nn.Conv2d(2 * w, 4 * w, 4, 2, 1),
            torch.nn.BatchNorm2d(4 * w), torch.nn.LeakyReLU(0.2),
            torch.nn.Conv2d(4 * w, 1, 4, 1, 0))

    def forward(self, x):
        return self.net(x).reshape(-1)


def gan_step(gen, critic, opt_g, opt_d, real, z):
    """One GAN iteration: the discriminator on a real and a generated
    batch, then the generator through the discriminator."""
    bce = torch.nn.BCEWithLogitsLoss()
    ones, zeros = torch.ones(real.shape[0]), torch.zeros(real.shape[0])
    opt_d.zero_grad(set_to_none=True)
    fake = gen(z)
    loss_d = bce(critic(real), ones) + bce(critic(fake.detach()), zeros)
    loss_d.backward()
    opt_d.step()
    opt_g.zero_grad(set_to_none=True)
    bce(critic(fake), ones).backward()
    opt_g.step()


class GPT(torch.nn.Module if torch else object):
    """A small decoder-only language model (GPT-2's shape, scaled down):
    token and position embeddings, pre-norm blocks with causal attention,
    the output head tied to the token embedding."""

    def __init__(self, vocab=2000, d=384, heads=6, layers=4, ctx=128):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(ctx, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.1, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.blocks = torch.nn.TransformerEncoder(layer, layers)
        self.norm = torch.nn.LayerNorm(d)
        self.mask = torch.nn.Transformer.generate_square_subsequent_mask(ctx)

    def forward(self, x):
        n = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(n))
        h = self.norm(self.blocks(h, mask=self.mask[:n, :n]))
        return h @ self.tok.weight.t()


def gpt(batch=4, seq=128, vocab=2000):
    """Next-token training on fresh random batches, with the gradient norm
    clipped before each step (as language models are trained)."""
    m = GPT(vocab=vocab, ctx=seq)
    g = torch.Generator().manual_seed(6)
    lossf = torch.nn.CrossEntropyLoss()

    def data():
        x = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        return x[:, :-1].contiguous(), x[:, 1:].contiguous()

    return m, data, lambda out, y: lossf(out.reshape(-1, vocab), y.reshape(-1))


class VAE(torch.nn.Module if torch else object):
    """Convolutional variational autoencoder on 3x64x64 images: a strided
    convolution encoder to a mean and a log-variance, a sample, and a
    transposed-convolution decoder back to the image."""

    def __init__(self, z=128, w=64):
        super().__init__()
        c = torch.nn
        self.enc = c.Sequential(
            c.Conv2d(3, w, 4, 2, 1), c.ReLU(), c.Conv2d(w, 2 * w, 4, 2, 1), c.ReLU(),
            c.Conv2d(2 * w, 4 * w, 4, 2, 1), c.ReLU(), c.Conv2d(4 * w, 8 * w, 4, 2, 1), c.ReLU(),
            c.Flatten())
        self.mu, self.logvar = c.Linear(8 * w * 16, z), c.Linear(8 * w * 16, z)
        self.up = c.Linear(z, 8 * w * 16)
        self.dec = c.Sequential(
            c.Unflatten(1, (8 * w, 4, 4)), c.ConvTranspose2d(8 * w, 4 * w, 4, 2, 1), c.ReLU(),
            c.ConvTranspose2d(4 * w, 2 * w, 4, 2, 1), c.ReLU(),
            c.ConvTranspose2d(2 * w, w, 4, 2, 1), c.ReLU(), c.ConvTranspose2d(w, 3, 4, 2, 1))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        zs = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(self.up(zs)), mu, logvar


def vae(batch=16, res=64):
    m = VAE()
    g = torch.Generator().manual_seed(7)

    def data():
        x = torch.rand(batch, 3, res, res, generator=g)
        return x, x

    def lossf(out, x):
        rec, mu, logvar = out
        kl = -0.5 * torch.mean(1 + logvar - mu * mu - logvar.exp())
        return torch.nn.functional.mse_loss(rec, x) + kl

    return m, data, lossf


def mobilenet(batch=8, res=96):
    import torchvision

    m = torchvision.models.mobilenet_v2(num_classes=100)
    x = torch.randn(batch, 3, res, res)
    y = torch.randint(0, 100, (batch,))
    return m, lambda: (x, y), torch.nn.CrossEntropyLoss()


MODELS = {"resnet18": resnet, "transformer": transformer, "lstm": lstm, "moe": moe,
          "seq2seq": seq2seq, "unet": unet, "decoder": decoder,
          "transformer_varlen": transformer_varlen, "gpt": gpt, "vae": vae,
          "mobilenet": mobilenet}


def train_step(m, data, lossf, opt, clip=None):
    x, y = data()
    opt.zero_grad(set_to_none=True)
    loss = lossf(m(x), y)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
    opt.step()


def eval_step(m, data):
    x, _ = data()
    with torch.no_grad():
        m(x)


ADAM = ("transformer", "moe", "seq2seq", "unet", "transformer_varlen", "vae")
# Trained with AdamW and the gradient norm clipped to this.
ADAMW_CLIP = {"gpt": 1.0}


def setup(name, training):
    torch.manual_seed(0)
    m, data, lossf = MODELS[name]()
    m.train(training)
    if name in ADAMW_CLIP:
        opt = torch.optim.AdamW(m.parameters(), lr=3e-4, weight_decay=0.1)
        return m, data, lossf, opt, ADAMW_CLIP[name]
    opt = (torch.optim.Adam(m.parameters(), lr=1e-4) if name in ADAM else
           torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9))
    return m, data, lossf, opt, None


def run_gan(iters, rec, batch=16):
    """DCGAN training (Adam, as the DCGAN paper): per iteration the
    discriminator's step, then the generator's. Seeded."""
    torch.manual_seed(0)
    gen, critic = Generator(), Critic()
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(critic.parameters(), lr=2e-4, betas=(0.5, 0.999))
    real = torch.randn(batch, 3, 32, 32)
    g = torch.Generator().manual_seed(5)
    with make_mode(rec):
        for _ in range(iters):
            gan_step(gen, critic, opt_g, opt_d, real, torch.randn(batch, 128, 1, 1, generator=g))
            rec.iteration()


def run_trace(kind, names, iters, rec):
    """kind: train, infer, phases (train, with an evaluation pass of two
    batches after every third step), interleave (a training step of each
    model in turn; one iteration is one round), decode (one batch of
    requests: prefill, then token-by-token generation with a KV cache),
    accum (train with the gradient of 4 micro-batches of 2 accumulated
    before each optimizer step), gan (a generator and a discriminator, each
    with its own step). The models are built before recording starts:
    initialisation is not part of the trace."""
    if kind == "gan":
        return run_gan(iters, rec)
    models = [setup(n, kind not in ("infer", "decode")) for n in names]
    m, data, lossf, opt, clip = models[0]
    with make_mode(rec):
        for i in range(iters):
            if kind == "train":
                train_step(m, data, lossf, opt, clip)
            elif kind == "infer":
                eval_step(m, data)
            elif kind == "decode":
                generate(m, data)
            elif kind == "phases":
                m.train()
                train_step(m, data, lossf, opt)
                if i % 3 == 2:
                    rec.iteration()
                    m.eval()
                    for _ in range(2):
                        eval_step(m, data)
            elif kind == "interleave":
                for mm in models:
                    train_step(*mm)
            elif kind == "accum":
                x, y = data()
                opt.zero_grad(set_to_none=True)
                for k in range(0, x.shape[0], 2):
                    lossf(m(x[k:k + 2]), y[k:k + 2]).backward()
                opt.step()
            rec.iteration()


# name -> (kind, models, iterations)
TRACES = {
    "resnet18-train": ("train", ["resnet18"], 16),
    "resnet18-infer": ("infer", ["resnet18"], 16),
    "transformer-train": ("train", ["transformer"], 16),
    "transformer-infer": ("infer", ["transformer"], 16),
    "lstm-train": ("train", ["lstm"], 16),
    "moe-train": ("train", ["moe"], 16),
    "resnet18-phases": ("phases", ["resnet18"], 18),
    "interleave-resnet18-transformer": ("interleave", ["resnet18", "transformer"], 10),
    # Recorded after the policy's constants were chosen (issue 32): reported
    # separately in docs/swap.md ("Traces recorded after the constants...").
    "seq2seq-attn-train": ("train", ["seq2seq"], 16),
    "unet-train": ("train", ["unet"], 16),
    "decoder-kvcache-decode": ("decode", ["decoder"], 12),
    # Recorded after issue 32's fourth part chose its rules (the long window,
    # own gaps and bursts): reported separately in docs/swap.md.
    "transformer-varlen-train": ("train", ["transformer_varlen"], 16),
    "dcgan-train": ("gan", ["dcgan"], 16),
    "resnet18-accum-train": ("accum", ["resnet18"], 16),
    # Recorded after issue 32's sixth part chose its rules (converging on the
    # followed shadow, loose signatures, MRU_STAY): reported separately.
    "gpt-train": ("train", ["gpt"], 16),
    "vae-train": ("train", ["vae"], 16),
    "mobilenet-train": ("train", ["mobilenet"], 16),
}


def origin(name, path, iters, min_bytes, op_names):
    """The header line naming what made this trace: the command that records
    exactly it (this trace only, its own iterations, bytes and directory).
    Only a trace made with the defaults into tests/swap/traces is one of the
    committed set."""
    cmd = ["python3", "tests/swap/record_traces.py", "--only", name]
    if iters:
        cmd += ["--iters", str(iters)]
    if min_bytes != 64 << 10:
        cmd += ["--min-bytes", str(min_bytes)]
    if op_names:
        cmd += ["--names"]
    cmd += ["--out", os.path.dirname(path) or "."]
    return "# origin: %s\n" % " ".join(cmd)


def record(name, path, iters=None, min_bytes=64 << 10, op_names=False):
    kind, names, n = TRACES[name]
    torch.set_num_threads(1)
    with lzma.open(path, "wt", preset=9) as f:
        f.write("# ipcshim swap trace v1\n")
        f.write("# %s: %s of %s, %d iterations, torch %s, min bytes %d\n" %
                (name, kind, "+".join(names), iters or n, torch.__version__, min_bytes))
        f.write(origin(name, path, iters, min_bytes, op_names))
        rec = Recorder(f, min_bytes)
        rec.names = op_names
        run_trace(kind, names, iters or n, rec)
    return rec.launches


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory for NAME.trace.xz")
    ap.add_argument("--only", nargs="*", help="traces to record (default: all)")
    ap.add_argument("--iters", type=int, help="iterations (default: per trace)")
    ap.add_argument("--min-bytes", type=int, default=64 << 10)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--names", action="store_true",
                    help="write the operator after each L (for reading; replay rejects it)")
    a = ap.parse_args()
    if a.list:
        for k, v in TRACES.items():
            print(k, *v)
        return 0
    if torch is None:
        print("record_traces: PyTorch is not installed (%s); on Debian: apt-get install -y "
              "python3-torch python3-torchvision" % TORCH_ERR, file=sys.stderr)
        return 77
    if not a.out:
        ap.error("--out is required")
    os.makedirs(a.out, exist_ok=True)
    for name in a.only or TRACES:
        if name not in TRACES:
            ap.error("unknown trace %s" % name)
        path = os.path.join(a.out, name + ".trace.xz")
        n = record(name, path, a.iters, a.min_bytes, a.names)
        print("%s: %d launches, %d bytes" % (path, n, os.path.getsize(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
