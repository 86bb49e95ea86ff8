// enhanced-data split: a seeded, deterministic split of a dataset (.ebin or JSON Lines) into
// parts by fractions, stratified by label where the set has labels (docs/cli.md "enhanced-data").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "enhanced/dataset.h"

namespace enhanced {

struct SplitOptions {
  std::vector<double> fractions;   // positive, summing to 1 (within 1e-6), at least two
  std::vector<std::string> names;  // one per part; empty: split_part_names' defaults
  uint64_t seed = 0;
};

struct SplitPart {
  std::string path;
  int64_t samples = 0;
};

// Throws Error unless the fractions are at least two positive finite numbers summing to 1.
void check_split_fractions(const std::vector<double>& fractions);

// The parts' names: `given` (checked: one per part, distinct, letters, digits, '_', '-', '.'),
// else train/valid/test for three parts, train/test for two, part1, part2, ... otherwise.
std::vector<std::string> split_part_names(size_t parts, const std::vector<std::string>& given);

// n cut by the fractions (which sum to 1): floor(f_k n) each, and the samples left over, one
// each, to the parts with the largest remainders (ties: the earlier part). Sums to n exactly.
std::vector<int64_t> largest_remainder_counts(int64_t n, const std::vector<double>& fractions);

// Each part's samples, in file order. Labeled: each label's samples (in file order) are permuted
// by the loader's seeded shuffle keyed by (seed, label) and cut by largest_remainder_counts, the
// first count going to part 0, the next to part 1, ...; unlabeled: the same on all samples with
// key (seed, 0).
std::vector<std::vector<int64_t>> split_samples(const Dataset& dataset, const std::vector<double>& fractions,
                                                uint64_t seed);

// Writes the listed samples of `dataset`, in that order, as a .ebin at `path` (the same bytes
// enhanced-data convert makes of those samples' JSON Lines). Not atomic: the caller writes to a
// temporary and commits it.
void write_ebin_samples(const std::string& path, const Dataset& dataset, const std::vector<int64_t>& samples);

// Splits `in` (.jsonl: JSON Lines, kept line for line; otherwise .ebin) into
// `out_prefix`-NAME with in's extension. Every part is written to a temporary and all are renamed
// into place at the end: a failure leaves none. Throws Error on a part that would be empty.
std::vector<SplitPart> split_dataset(const std::string& in, const std::string& out_prefix, const SplitOptions& options);

}  // namespace enhanced
