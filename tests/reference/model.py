"""PyTorch reference of the model in docs/model.md (independent of the C++ engine).

Submodule and parameter names are the checkpoint names of docs/model.md, so
`model.load_state_dict({name: tensor})` takes an engine checkpoint as it is.

Batch (CSR over the B*T positions, row-major b*T + t):
  identifier_offsets  int [B*T+1]  (offsets[0] == 0, non-decreasing, offsets[-1] == n)
  identifier_ids      int [n]      (n may be 0)
  cur_word_ids        int [B*T]
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BLENDS = ("mean", "scalar-mean")
POOLS = ("feature", "time")


class Model(nn.Module):
    def __init__(self, vocab_size, embedding_dim, hidden, seq_len, num_labels,
                 blend="mean", pool="feature", dtype=torch.float32):
        super().__init__()
        if blend not in BLENDS:
            raise ValueError(f"blend must be one of {BLENDS}, got {blend!r}")
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
        self.V, self.D, self.H, self.T, self.L = vocab_size, embedding_dim, hidden, seq_len, num_labels
        self.blend_mode, self.pool_mode = blend, pool
        self.embedding = nn.Embedding(vocab_size, embedding_dim)  # dense gradient
        self.lstm = nn.LSTM(embedding_dim, hidden, num_layers=1, bias=True,
                            batch_first=True, bidirectional=True)
        features = seq_len if pool == "feature" else 2 * hidden
        self.dense = nn.Linear(features, num_labels)
        self.to(dtype)

    @classmethod
    def from_metadata(cls, md, dtype=torch.float32):
        """Build from checkpoint __metadata__ (all values strings)."""
        return cls(int(md["vocab_size"]), int(md["embedding_dim"]), int(md["hidden"]),
                   int(md["seq_len"]), int(md["num_labels"]),
                   blend=md.get("blend", "mean"), pool=md.get("pool", "feature"), dtype=dtype)

    def metadata(self):
        return {"vocab_size": str(self.V), "embedding_dim": str(self.D), "hidden": str(self.H),
                "seq_len": str(self.T), "num_labels": str(self.L),
                "blend": self.blend_mode, "pool": self.pool_mode}

    # -- step 1: embedding blend ------------------------------------------------------------
    def blend(self, identifier_offsets, identifier_ids, cur_word_ids, B, T):
        """Returns x of shape (B, T, D)."""
        offsets = torch.as_tensor(identifier_offsets).long()
        ids = torch.as_tensor(identifier_ids).long()
        cur = torch.as_tensor(cur_word_ids).long()
        P = B * T
        if offsets.numel() != P + 1 or cur.numel() != P:
            raise ValueError(f"batch shapes: offsets {offsets.numel()} (want {P + 1}), "
                             f"cur_word_ids {cur.numel()} (want {P})")
        W = self.embedding.weight
        e_cur = F.embedding(cur, W)                                   # (P, D)
        counts = offsets[1:] - offsets[:-1]                           # (P,)
        seg = torch.repeat_interleave(torch.arange(P), counts)        # position of each id
        rows = F.embedding(ids, W)                                    # (n, D)
        sums = torch.zeros(P, self.D, dtype=W.dtype).index_add(0, seg, rows)  # (P, D)
        has = (counts > 0).unsqueeze(1)                               # (P, 1)
        cnt = counts.clamp(min=1).to(W.dtype).unsqueeze(1)
        if self.blend_mode == "mean":
            ident = sums / cnt                                        # per-dimension mean
        else:  # scalar-mean: tf.reduce_mean over all n*D numbers, broadcast over D
            ident = sums.sum(dim=1, keepdim=True) / (cnt * self.D)
        x = torch.where(has, 0.5 * ident + 0.5 * e_cur, e_cur)
        return x.reshape(B, T, self.D)

    # -- full forward ------------------------------------------------------------------------
    def forward(self, identifier_offsets, identifier_ids, cur_word_ids, B, T):
        """Returns logits (B, L)."""
        if T != self.T:
            raise ValueError(f"batch seq_len {T} != model seq_len {self.T}")
        x = self.blend(identifier_offsets, identifier_ids, cur_word_ids, B, T)
        y, _ = self.lstm(x)                                           # (B, T, 2H), zero init state
        if self.pool_mode == "feature":
            p = y.max(dim=2).values                                   # (B, T)
        else:
            p = y.max(dim=1).values                                   # (B, 2H)
        return self.dense(p)

    def loss(self, logits, labels, class_weights=None):
        """Mean cross-entropy; with class_weights (L), torch's weighted mean
        sum_i w[y_i] * nll_i / sum_i w[y_i] (CrossEntropyLoss(weight=w))."""
        weight = None if class_weights is None else torch.as_tensor(class_weights).to(logits.dtype)
        return F.cross_entropy(logits, torch.as_tensor(labels).long(), weight=weight, reduction="mean")


@torch.no_grad()
def keras_init(model, generator=None):
    """The contract's initialisation (Keras defaults): embedding U(-0.05, 0.05); W_ih glorot-uniform over
    [4H, D]; W_hh orthogonal over [4H, H]; bias_ih 0, bias_hh 0 except forget quarter 1;
    dense glorot-uniform, bias 0."""
    def uniform_(t, a):
        t.copy_((torch.rand(t.shape, generator=generator, dtype=torch.float64) * 2 - 1) * a)

    def glorot_(t):
        fan_out, fan_in = t.shape
        uniform_(t, math.sqrt(6.0 / (fan_in + fan_out)))

    def orthogonal_(t):
        rows, cols = t.shape
        a = torch.randn(max(rows, cols), min(rows, cols), generator=generator, dtype=torch.float64)
        q, r = torch.linalg.qr(a)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        t.copy_(q if rows >= cols else q.T)

    H = model.H
    uniform_(model.embedding.weight, 0.05)
    for sfx in ("", "_reverse"):
        glorot_(getattr(model.lstm, "weight_ih_l0" + sfx))
        orthogonal_(getattr(model.lstm, "weight_hh_l0" + sfx))
        getattr(model.lstm, "bias_ih_l0" + sfx).zero_()
        b = getattr(model.lstm, "bias_hh_l0" + sfx)
        b.zero_()
        b[H:2 * H] = 1.0
    glorot_(model.dense.weight)
    model.dense.bias.zero_()
    return model
