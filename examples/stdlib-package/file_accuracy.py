#!/usr/bin/env python3
"""Per-file accuracy: each test file's label is the one most of its windows were given (ties: the
lowest label). Reads make_data.py's samples-test.tsv and enhanced-eval's --predictions CSV.
Standard library only."""
import collections
import csv
import sys


def main(samples_tsv, predictions_csv):
    with open(samples_tsv) as f:
        file_of = {int(row["sample"]): row["file"] for row in csv.DictReader(f, delimiter="\t")}
    votes, truth = collections.defaultdict(collections.Counter), {}
    with open(predictions_csv) as f:
        for row in csv.DictReader(f):
            name = file_of[int(row["sample"])]
            votes[name][int(row["predicted"])] += 1
            truth[name] = int(row["label"])
    right = sum(1 for name, counter in votes.items()
                if min(counter, key=lambda label: (-counter[label], label)) == truth[name])
    majority = max(collections.Counter(truth.values()).values())
    print(f"per file (majority vote of its windows): {right}/{len(votes)} = {100 * right / len(votes):.1f}% "
          f"(chance: {100 * majority / len(votes):.1f}% majority, {100 / len(set(truth.values())):.1f}% uniform)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: file_accuracy.py samples-test.tsv test-predictions.csv")
    main(sys.argv[1], sys.argv[2])
