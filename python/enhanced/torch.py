"""PyTorch: the model of docs/model.md as an `nn.Module` whose `state_dict()` keys are the
engine's checkpoint names, so a checkpoint loads as it is (`strict=True`) and a state_dict saves
back into one (`save_checkpoint`).

Input, per batch of B samples of T positions (field 1, the auxiliary ids, is not used):
- cur_word        (B, T) ids;
- identifier ids, in one of two forms:
  CSR     identifier_ids (n,) every identifier id in position order (b*T + t), with
          identifier_lengths (B, T) ids per position, or identifier_offsets (B*T+1,);
  padded  identifier_ids (B, T, K), with identifier_lengths (B, T) (the first n of K are ids,
          the rest padding of any value) or identifier_mask (B, T, K), True where an id is.
NumPy arrays are taken too (what `Ebin.to_csr()` gives).
"""
import os

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .checkpoint import load_checkpoint, save_checkpoint
from .ebin import Ebin, read_ebin


def _long(x, device):
    """An integer tensor (int64) on `device` from a tensor or an array (uint64 and read-only
    arrays, such as an Ebin's views, are copied)."""
    if isinstance(x, torch.Tensor):
        return x.to(device=device, dtype=torch.long)
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise ValueError(f"expected integer ids, lengths or offsets, got dtype {x.dtype}")
    return torch.from_numpy(np.array(x, dtype=np.int64)).to(device)


def _require_in_range(values, low, high, name, seq_len):
    """ValueError naming the sample and the position (index p: sample p // T, position p % T) of
    the first of `values` (one per position, (B*T,)) outside [low, high)."""
    bad = (values < low) | (values >= high)
    if bad.any():  # one device sync, only the error path looks further
        p = int(bad.nonzero()[0, 0])
        raise ValueError(f"{name} must be in [{low}, {high}): sample {p // seq_len}, position {p % seq_len} "
                         f"holds {int(values[p])}")


class EnhancedModule(nn.Module):
    """Embedding blend -> BiLSTM -> max-pool -> dense (docs/model.md); `forward` returns logits
    (B, L). A fresh module has PyTorch's default initialisation, not the engine's."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.vocab_size, config.embedding_dim)
        self.lstm = nn.LSTM(config.embedding_dim, config.hidden, batch_first=True, bidirectional=True)
        self.dense = nn.Linear(config.pooled_features, config.num_labels)

    @classmethod
    def from_checkpoint(cls, path):
        """The module of an engine checkpoint (its config from the metadata), weights loaded."""
        config, tensors = load_checkpoint(path)
        module = cls(config)
        module.load_state_dict({name: torch.from_numpy(array) for name, array in tensors.items()}, strict=True)
        return module

    def save_checkpoint(self, path):
        """Writes the weights as an engine checkpoint (`enhanced-train --init-from`, `enhanced-eval`)."""
        save_checkpoint(path, self.config, {name: t.detach().cpu().numpy() for name, t in self.state_dict().items()})

    def _csr(self, identifier_ids, lengths, offsets, mask, positions):
        """(ids (n,), offsets (B*T+1,) from 0) from either input form, checked: ValueError naming the
        sample and the position of a negative length or an id outside [0, V)."""
        seq_len = self.config.seq_len
        device = self.embedding.weight.device
        given = sum(x is not None for x in (lengths, offsets, mask))
        if given != 1:
            raise ValueError("give exactly one of identifier_lengths, identifier_offsets, identifier_mask")
        ids = _long(identifier_ids, device)
        if ids.dim() == 3:  # padded (B, T, K)
            if offsets is not None:
                raise ValueError("padded identifier_ids (B, T, K) take identifier_lengths or identifier_mask")
            if mask is None:
                lengths = _long(lengths, device)
                if lengths.numel() != positions:
                    raise ValueError(f"identifier_lengths: expected (B, T) = {positions} counts, "
                                     f"got shape {list(lengths.shape)}")
                _require_in_range(lengths.reshape(-1), 0, ids.shape[2] + 1, "identifier_lengths", seq_len)
                mask = torch.arange(ids.shape[2], device=device) < lengths.reshape(ids.shape[:2]).unsqueeze(2)
            mask = torch.as_tensor(mask, device=device).bool()
            if mask.shape != ids.shape or ids.shape[0] * ids.shape[1] != positions:
                raise ValueError(f"identifier_ids {list(ids.shape)} and identifier_mask {list(mask.shape)} must "
                                 f"both be (B, T, K) with B*T = {positions}")
            ids, lengths = ids[mask], mask.sum(2)  # row-major: position b*T + t, then k
        elif ids.dim() != 1:
            raise ValueError(f"identifier_ids: expected (n,) CSR ids or (B, T, K) padded ids, got {list(ids.shape)}")
        elif mask is not None:
            raise ValueError("CSR identifier_ids (n,) take identifier_lengths or identifier_offsets")
        if offsets is None:
            lengths = _long(lengths, device).reshape(-1)
            offsets = torch.cat([torch.zeros(1, dtype=torch.long, device=device), lengths.cumsum(0)])
        else:
            offsets = _long(offsets, device)
            offsets = offsets - offsets[0]
        if offsets.numel() != positions + 1 or offsets[-1] != ids.numel():
            raise ValueError(f"identifier lengths/offsets: expected {positions} positions holding the "
                             f"{ids.numel()} ids, got {offsets.numel() - 1} positions holding {int(offsets[-1])}")
        _require_in_range(offsets[1:] - offsets[:-1], 0, ids.numel() + 1, "identifier lengths", seq_len)
        bad = (ids < 0) | (ids >= self.config.vocab_size)
        if bad.any():  # named by its position: the last offset at or before it
            k = int(bad.nonzero()[0, 0])
            position = int(torch.searchsorted(offsets, k, right=True)) - 1
            raise ValueError(f"identifier ids must be in [0, {self.config.vocab_size}): sample "
                             f"{position // seq_len}, position {position % seq_len} holds {int(ids[k])}")
        return ids, offsets

    def blend(self, cur_word, ids, offsets):
        """x (B, T, D): E[cur] where a position has no identifier ids, else half the identifier
        mean (per dimension; scalar-mean: over all n*D numbers) plus half E[cur]."""
        B, T = cur_word.shape
        weight = self.embedding.weight
        current = self.embedding(cur_word).reshape(B * T, -1)                                   # (B*T, D)
        mean = F.embedding_bag(ids, weight, offsets, mode="mean", include_last_offset=True)     # (B*T, D)
        if self.config.blend == "scalar-mean":
            mean = mean.mean(dim=1, keepdim=True)                                               # (B*T, 1)
        has_ids = (offsets[1:] > offsets[:-1]).unsqueeze(1)                                     # (B*T, 1)
        return torch.where(has_ids, 0.5 * mean + 0.5 * current, current).reshape(B, T, -1)

    def forward(self, cur_word, identifier_ids, identifier_lengths=None, identifier_offsets=None,
                identifier_mask=None):
        """Logits (B, L) of a batch in the CSR or the padded form (the module's doc)."""
        cur_word = _long(cur_word, self.embedding.weight.device)
        if cur_word.dim() != 2 or cur_word.shape[1] != self.config.seq_len:
            raise ValueError(f"cur_word: expected (B, T) with T = {self.config.seq_len}, got {list(cur_word.shape)}")
        _require_in_range(cur_word.reshape(-1), 0, self.config.vocab_size, "cur_word ids", self.config.seq_len)
        ids, offsets = self._csr(identifier_ids, identifier_lengths, identifier_offsets, identifier_mask,
                                 cur_word.numel())
        y, _ = self.lstm(self.blend(cur_word, ids, offsets))                                    # (B, T, 2H)
        pooled = y.max(dim=2 if self.config.pool == "feature" else 1).values                    # (B, T) or (B, 2H)
        return self.dense(pooled)

    @torch.no_grad()
    def predict(self, data, batch_size=256):
        """Logits (N, L) float32 NumPy of an .ebin file (a path or `read_ebin`'s Ebin) or of a
        CSR dict (`Ebin.to_csr()`'s form), in batches."""
        if isinstance(data, (str, os.PathLike)):
            data = read_ebin(data)
        if isinstance(data, Ebin):
            batches = (data.to_csr(start, start + batch_size) for start in range(0, len(data), batch_size))
        else:
            batches = [data]
        logits = [self(csr["cur_word"], csr["identifier_ids"], csr["identifier_lengths"]).cpu().numpy()
                  for csr in batches]
        return np.concatenate(logits) if logits else np.zeros((0, self.config.num_labels), np.float32)
