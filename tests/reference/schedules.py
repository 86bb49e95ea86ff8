#!/usr/bin/env python3
"""The engine's learning-rate schedules against torch.optim.lr_scheduler.

Reads a run's metrics.jsonl (written with --log-every 1, so every step's rate is there) and
recomputes each step's rate with torch's own schedulers on a dummy parameter: StepLR,
CosineAnnealingLR, LinearLR and ReduceLROnPlateau (fed the run's logged validation losses), after
the engine's warm-up (step s of W at lr * (s + 1) / W). Nothing here imports engine code.

    schedules.py METRICS --schedule cosine --lr 0.1 --steps 20 [--warmup 3] [--min-lr 0.01]
                 [--step-size 4] [--factor 0.5] [--patience 1] [--min-delta 0] [--rtol 1e-6]

Exit 0 when every step's rate agrees within rtol (the engine logs float32), 1 otherwise.
"""
import argparse
import json
import sys

import torch


def torch_rates(args, validations):
    """The rate of every step, 0-based, as torch computes it; validations: {step: valid_loss}."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=args.lr)
    span = max(args.steps - args.warmup, 1)
    if args.schedule == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=args.step_size, gamma=args.factor)
    elif args.schedule == "cosine":
        scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=span, eta_min=args.min_lr)
    elif args.schedule == "linear":
        scheduler = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=1.0, end_factor=args.min_lr / args.lr,
                                                      total_iters=span)
    elif args.schedule == "plateau":
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer, mode="min", factor=args.factor, patience=args.patience, threshold=args.min_delta,
            threshold_mode="abs", min_lr=args.min_lr)
    else:
        scheduler = None
    rates = []
    for step in range(args.steps):
        if step < args.warmup:
            rates.append(args.lr * (step + 1) / args.warmup)
        else:
            rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        if args.schedule == "plateau":
            if step + 1 in validations:  # a validation after step + 1 steps sets the next step's rate
                scheduler.step(validations[step + 1])
        elif scheduler is not None and step >= args.warmup:
            scheduler.step()
    return rates


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("metrics")
    parser.add_argument("--schedule", required=True, choices=["constant", "step", "cosine", "linear", "plateau"])
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--min-lr", type=float, default=0.0)
    parser.add_argument("--step-size", type=int, default=1)
    parser.add_argument("--factor", type=float, default=0.1)
    parser.add_argument("--patience", type=int, default=10)
    parser.add_argument("--min-delta", type=float, default=0.0)
    parser.add_argument("--rtol", type=float, default=1e-6)
    args = parser.parse_args()
    if args.schedule == "plateau" and args.warmup:
        parser.error("torch's ReduceLROnPlateau is not chained after a warm-up here")
    engine, validations = {}, {}
    with open(args.metrics) as lines:
        for line in lines:
            record = json.loads(line)
            if record["kind"] == "train":
                engine[record["step"] - 1] = record["lr"]
            if "valid_loss" in record:
                validations[record["step"]] = record["valid_loss"]
    expected = torch_rates(args, validations)
    failures = 0
    for step, rate in enumerate(expected):
        got = engine.get(step)
        ok = got is not None and abs(got - rate) <= args.rtol * max(abs(rate), 1e-30)
        failures += not ok
        print(f"step {step}: engine {got} torch {rate} {'ok' if ok else 'FAIL'}")
    print(f"summary: {args.schedule}: {len(expected) - failures} of {len(expected)} steps agree")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
