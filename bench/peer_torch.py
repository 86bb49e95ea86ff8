"""The model in PyTorch as a user would vectorise it (embedding-bag blend, bidirectional nn.LSTM,
max, linear, cross-entropy, Adam), timed on a bench case. Prints one JSON object.

usage: peer_torch.py CASE_DIR --threads N [--warmup W] [--repeats R] [--device cpu|cuda] [--compile]
                    [--compile-rnn] [--tf32]

--device cuda runs it on the GPU (cuDNN LSTM) in plain FP32: PyTorch lets cuDNN use TF32 by
default (torch.backends.cudnn.allow_tf32), the engine does not (FP32 with FMA), so TF32 is turned
off in cuDNN and cuBLAS unless --tf32 turns it on in both, as the engine's --tf32 does.
--compile wraps the model in torch.compile(mode="reduce-overhead"), which replays CUDA graphs on a
GPU. Dynamo breaks its graph at nn.LSTM (torch._dynamo.config.allow_rnn is off by default): the
LSTM then runs eagerly through cuDNN between two compiled pieces, and the JSON says so
("lstm": "eager (graph break)"). --compile-rnn sets allow_rnn, so Dynamo traces into the LSTM
(which Inductor may unroll over the sequence: slow to compile at T = 400).
--bf16 runs forward and loss under torch.autocast(device, dtype=torch.bfloat16), PyTorch's own
mixed precision: the LSTM and the linear layer in bfloat16, the weights and Adam in FP32."""
import contextlib
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
    parser.add_argument("--compile-rnn", action="store_true", help="with --compile: let Dynamo trace nn.LSTM")
    parser.add_argument("--tf32", action="store_true", help="allow TF32 in cuDNN and cuBLAS (default: off)")
    parser.add_argument("--bf16", action="store_true", help="torch.autocast with dtype=torch.bfloat16")
    args = parser.parse_args()
    precision = set_tf32(args.tf32) if args.device == "cuda" else "fp32"
    if args.bf16:
        precision = "bf16 autocast"
    autocast = ((lambda: torch.autocast(args.device, dtype=torch.bfloat16)) if args.bf16
                else contextlib.nullcontext)
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
    with torch.no_grad(), autocast():
        loss = F.cross_entropy(model(ids, offsets, counts, cur, B, T).float(), labels).item()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    lstm = "eager"
    if args.compile:
        torch._dynamo.config.allow_rnn = args.compile_rnn
        lstm = "compiled (allow_rnn)" if torch._dynamo.config.allow_rnn else "eager (graph break)"
    forward = torch.compile(model, mode="reduce-overhead") if args.compile else model
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def step():  # one training step, the forward and loss under autocast when --bf16
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            step_loss = F.cross_entropy(forward(ids, offsets, counts, cur, B, T).float(), labels)
        step_loss.backward()
        optimizer.step()

    def train_step():
        step()
        sync()

    def inference_step():
        with torch.no_grad(), autocast():
            forward(ids, offsets, counts, cur, B, T)
        sync()

    # On a GPU, as the engine's bench times it: steps queued back to back, one wait per 20 (a
    # training loop that reads the loss only at its logging interval); each sample is one step's
    # share. The per-step wait is timed too ("train step, sync").
    pipelined = 20

    def train_steps():
        for _ in range(pipelined):
            step()
        sync()

    inference = timed(inference_step, args.warmup, args.repeats)  # before training moves the weights
    times = {"inference step": inference}
    if args.device == "cuda":
        times["train step"] = {k: v / pipelined for k, v in timed(train_steps, args.warmup, args.repeats).items()}
        times["train step, sync"] = timed(train_step, args.warmup, args.repeats)
    else:
        times["train step"] = timed(train_step, args.warmup, args.repeats)
    name = ("pytorch" + ("-cuda" if args.device == "cuda" else "") + ("-compiled" if args.compile else "")
            + ("-bf16" if args.bf16 else ""))
    print(json.dumps({"peer": name, "version": torch.__version__, "threads": args.threads, "loss": loss,
                      "precision": precision, "lstm": lstm, "times": times}))


def set_tf32(on):
    """TF32 on or off in cuDNN (its LSTM included) and cuBLAS; returns what the backends report.
    PyTorch >= 2.9 has per-backend fp32_precision settings (the allow_tf32 flags are deprecated
    there, and mixing the two is refused); older ones only the flags."""
    if hasattr(torch.backends, "fp32_precision"):
        mode = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.fp32_precision = mode
        torch.backends.cudnn.rnn.fp32_precision = mode
        return (f"cudnn.rnn {torch.backends.cudnn.rnn.fp32_precision}, "
                f"cuda.matmul {torch.backends.cuda.matmul.fp32_precision}")
    torch.backends.cudnn.allow_tf32 = on
    torch.backends.cuda.matmul.allow_tf32 = on
    return f"cudnn.allow_tf32 {torch.backends.cudnn.allow_tf32}, matmul.allow_tf32 {torch.backends.cuda.matmul.allow_tf32}"


if __name__ == "__main__":
    main()
