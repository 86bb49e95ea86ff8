"""The model in PyTorch as a user would vectorise it (embedding-bag blend, bidirectional nn.LSTM,
max, linear, cross-entropy, Adam), timed on a bench case. Prints one JSON object.

usage: peer_torch.py CASE_DIR --threads N [--warmup W] [--repeats R] [--device cpu|cuda] [--compile]

--device cuda runs it on the GPU (cuDNN LSTM); --compile wraps the model in
torch.compile(mode="reduce-overhead"), which replays CUDA graphs on a GPU."""
import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from case_io import load_case, timed


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embedding = nn.Embedding(c["vocab_size"], c["embedding_dim"])
        self.lstm = nn.LSTM(c["embedding_dim"], c["hidden"], batch_first=True, bidirectional=True)
        features = c["seq_len"] if c["pool"] == "feature" else 2 * c["hidden"]
        self.dense = nn.Linear(features, c["num_labels"])

    def forward(self, ids, offsets, counts, cur, B, T):
        weight = self.embedding.weight
        current = F.embedding(cur, weight)
        if self.c["blend"] == "mean":
            identifier = F.embedding_bag(ids, weight, offsets, mode="mean")  # empty bags give 0
        else:  # the original: one scalar mean over all n*D numbers of the identifier rows
            sums = F.embedding_bag(ids, weight, offsets, mode="sum").sum(dim=1, keepdim=True)
            identifier = sums / (counts.clamp(min=1) * weight.shape[1]).unsqueeze(1)
        x = torch.where((counts > 0).unsqueeze(1), 0.5 * identifier + 0.5 * current, current)
        y, _ = self.lstm(x.view(B, T, -1))
        pooled = y.max(dim=2).values if self.c["pool"] == "feature" else y.max(dim=1).values
        return self.dense(pooled)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("case")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    c, weights, batch = load_case(args.case)
    model = Model(c)
    model.load_state_dict({name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in weights.items()})
    model.to(device)
    offsets_all = torch.from_numpy(batch["identifier_offsets"].astype(np.int64)).to(device)
    ids = torch.from_numpy(batch["identifier_ids"].astype(np.int64)).to(device)
    offsets = offsets_all[:-1].contiguous()
    counts = (offsets_all[1:] - offsets_all[:-1]).float()
    cur = torch.from_numpy(batch["cur_word_ids"].astype(np.int64)).to(device)
    labels = torch.from_numpy(batch["labels"].astype(np.int64)).to(device)
    B, T = c["batch_size"], c["seq_len"]
    with torch.no_grad():
        loss = F.cross_entropy(model(ids, offsets, counts, cur, B, T), labels).item()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    forward = torch.compile(model, mode="reduce-overhead") if args.compile else model
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(forward(ids, offsets, counts, cur, B, T), labels).backward()
        optimizer.step()
        sync()

    def inference_step():
        with torch.no_grad():
            forward(ids, offsets, counts, cur, B, T)
        sync()

    # On a GPU, as the engine's bench times it: steps queued back to back, one wait per 20 (a
    # training loop that reads the loss only at its logging interval); each sample is one step's
    # share. The per-step wait is timed too ("train step, sync").
    pipelined = 20

    def train_steps():
        for _ in range(pipelined):
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(forward(ids, offsets, counts, cur, B, T), labels).backward()
            optimizer.step()
        sync()

    inference = timed(inference_step, args.warmup, args.repeats)  # before training moves the weights
    times = {"inference step": inference}
    if args.device == "cuda":
        times["train step"] = {k: v / pipelined for k, v in timed(train_steps, args.warmup, args.repeats).items()}
        times["train step, sync"] = timed(train_step, args.warmup, args.repeats)
    else:
        times["train step"] = timed(train_step, args.warmup, args.repeats)
    name = "pytorch" + ("-cuda" if args.device == "cuda" else "") + ("-compiled" if args.compile else "")
    print(json.dumps({"peer": name, "version": torch.__version__, "threads": args.threads, "loss": loss,
                      "times": times}))


if __name__ == "__main__":
    main()
