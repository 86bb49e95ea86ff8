// Seeded, stratified splits of a dataset, and the .ebin writer of a subset of samples.
#include "enhanced/split.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"
#include "enhanced/jsonl.h"
#include "enhanced/loader.h"
#include "enhanced/text.h"
#include "io/line_reader.h"

namespace enhanced {

void check_split_fractions(const std::vector<double>& fractions) {
  if (fractions.size() < 2) fail("--fractions needs at least two parts, got ", fractions.size());
  double sum = 0;
  for (size_t k = 0; k < fractions.size(); ++k) {
    if (!std::isfinite(fractions[k]) || fractions[k] <= 0)
      fail("--fractions: part ", k + 1, " is ", fractions[k], ", must be positive");
    sum += fractions[k];
  }
  if (std::abs(sum - 1.0) > 1e-6) fail("--fractions must sum to 1, they sum to ", sum);
}

std::vector<std::string> split_part_names(size_t parts, const std::vector<std::string>& given) {
  if (given.empty()) {
    if (parts == 3) return {"train", "valid", "test"};
    if (parts == 2) return {"train", "test"};
    std::vector<std::string> names;
    for (size_t k = 1; k <= parts; ++k) names.push_back("part" + std::to_string(k));
    return names;
  }
  if (given.size() != parts) fail("--names gives ", given.size(), " names for ", parts, " fractions");
  for (size_t k = 0; k < given.size(); ++k) {
    const std::string& name = given[k];
    if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") !=
                            std::string::npos)
      fail("--names: '", excerpt(name), "' is not a file-name part (letters, digits, '_', '-', '.')");
    if (std::find(given.begin(), given.begin() + static_cast<std::ptrdiff_t>(k), name) !=
        given.begin() + static_cast<std::ptrdiff_t>(k))
      fail("--names: '", excerpt(name), "' is given twice");
  }
  return given;
}

std::vector<int64_t> largest_remainder_counts(int64_t n, const std::vector<double>& fractions) {
  const double total = std::accumulate(fractions.begin(), fractions.end(), 0.0);  // 1 within 1e-6
  std::vector<int64_t> counts(fractions.size());
  std::vector<double> remainder(fractions.size());
  int64_t given = 0;
  for (size_t k = 0; k < fractions.size(); ++k) {
    const double exact = static_cast<double>(n) * (fractions[k] / total);
    counts[k] = std::min<int64_t>(static_cast<int64_t>(std::floor(exact)), n - given);
    remainder[k] = exact - static_cast<double>(counts[k]);
    given += counts[k];
  }
  std::vector<size_t> order(fractions.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return remainder[a] > remainder[b]; });
  for (size_t i = 0; given < n; i = (i + 1) % order.size(), ++given) ++counts[order[i]];
  return counts;
}

std::vector<std::vector<int64_t>> split_samples(const Dataset& dataset, const std::vector<double>& fractions,
                                                uint64_t seed) {
  const int64_t n = dataset.num_samples();
  std::vector<std::vector<int64_t>> groups;  // [label] -> its samples in file order
  if (dataset.has_labels()) {
    groups.resize(static_cast<size_t>(dataset.num_labels()));
    for (int64_t s = 0; s < n; ++s) groups[static_cast<size_t>(dataset.label(s))].push_back(s);
  } else {
    groups.emplace_back(static_cast<size_t>(n));
    std::iota(groups[0].begin(), groups[0].end(), int64_t{0});
  }
  std::vector<std::vector<int64_t>> parts(fractions.size());
  for (size_t key = 0; key < groups.size(); ++key) {
    const std::vector<int64_t>& group = groups[key];
    const int64_t size = static_cast<int64_t>(group.size());
    const std::vector<int64_t> order = epoch_order(size, true, seed, static_cast<int64_t>(key));
    const std::vector<int64_t> counts = largest_remainder_counts(size, fractions);
    size_t at = 0;
    for (size_t k = 0; k < parts.size(); ++k)
      for (int64_t i = 0; i < counts[k]; ++i) parts[k].push_back(group[static_cast<size_t>(order[at++])]);
  }
  for (std::vector<int64_t>& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

namespace {

// The header of the listed samples: counts, largest id and label, sections laid out.
DatasetHeader subset_header(const Dataset& dataset, const std::vector<int64_t>& samples) {
  DatasetHeader h{};
  std::memcpy(h.magic, kDatasetMagic, sizeof(kDatasetMagic));
  h.version = kDatasetVersion;
  h.seq_len = static_cast<uint32_t>(dataset.seq_len());
  h.num_samples = samples.size();
  h.flags = dataset.has_labels() ? 0 : kDatasetUnlabeled;
  int32_t max_id = -1, max_label = -1;
  for (int64_t s : samples) {
    if (dataset.has_labels()) max_label = std::max(max_label, dataset.label(s));
    for (int t = 0; t < dataset.seq_len(); ++t) {
      for (int32_t id : dataset.identifier(s, t)) max_id = std::max(max_id, id);
      for (int32_t id : dataset.auxiliary(s, t)) max_id = std::max(max_id, id);
      max_id = std::max(max_id, dataset.cur_word(s, t));
      h.num_identifier_ids += dataset.identifier(s, t).size();
      h.num_auxiliary_ids += dataset.auxiliary(s, t).size();
    }
  }
  h.num_labels = static_cast<uint32_t>(max_label + 1);
  h.max_token_id = max_id;
  lay_out_sections(h);
  return h;
}

// One ragged field's offsets (a running count from 0) and then its ids, each section padded.
template <class Field>
void write_ragged(FileWriter& out, const Dataset& dataset, const std::vector<int64_t>& samples, Field field) {
  uint64_t count = 0;
  out.put<uint64_t>(0);
  for (int64_t s : samples)
    for (int t = 0; t < dataset.seq_len(); ++t) out.put<uint64_t>(count += field(s, t).size());
  out.pad_to(8);
  for (int64_t s : samples)
    for (int t = 0; t < dataset.seq_len(); ++t) {
      const std::span<const int32_t> ids = field(s, t);
      out.write(ids.data(), ids.size_bytes());
    }
  out.pad_to(8);
}

}  // namespace

void write_ebin_samples(const std::string& path, const Dataset& dataset, const std::vector<int64_t>& samples) {
  const DatasetHeader h = subset_header(dataset, samples);
  FileWriter out(path);
  out.put(h);
  if (dataset.has_labels()) {
    for (int64_t s : samples) out.put(dataset.label(s));
    out.pad_to(8);
  }
  for (int64_t s : samples)
    for (int t = 0; t < dataset.seq_len(); ++t) out.put(dataset.cur_word(s, t));
  out.pad_to(8);
  write_ragged(out, dataset, samples, [&](int64_t s, int t) { return dataset.identifier(s, t); });
  write_ragged(out, dataset, samples, [&](int64_t s, int t) { return dataset.auxiliary(s, t); });
  if (out.size() != h.file_size) fail(path, ": internal error: wrote ", out.size(), " bytes, expected ", h.file_size);
  out.close();
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The JSON Lines parts: each line of `in` copied, as it is, into its sample's part.
// Its lines were parsed already, so each is bounded by the set's T.
void write_jsonl_parts(const std::string& in, int seq_len, const std::vector<int>& part_of,
                       std::vector<std::unique_ptr<FileWriter>>& outs) {
  LineReader input(in, jsonl_line_limit(seq_len), jsonl_line_limit_reason(seq_len));
  std::string line;
  size_t sample = 0;
  while (input.next(line)) {
    if (sample >= part_of.size()) fail(in, ": changed while being split (more lines than samples)");
    FileWriter& out = *outs[static_cast<size_t>(part_of[sample++])];
    out.write(line.data(), line.size());
    out.put('\n');
  }
  if (sample != part_of.size()) fail(in, ": changed while being split (fewer lines than samples)");
}

}  // namespace

std::vector<SplitPart> split_dataset(const std::string& in, const std::string& out_prefix, const SplitOptions& options) {
  check_split_fractions(options.fractions);
  const std::vector<std::string> names = split_part_names(options.fractions.size(), options.names);
  const bool jsonl = ends_with(in, ".jsonl");
  const std::string extension = jsonl ? ".jsonl" : ".ebin";
  std::vector<SplitPart> parts;
  for (const std::string& name : names) {
    parts.push_back({out_prefix + "-" + name + extension, 0});
    if (same_file(in, parts.back().path)) fail(parts.back().path, ": output would overwrite the input");
  }
  check_output_directory(parts[0].path);
  remove_stale_temp_files_beside(parts[0].path);

  TempFiles temps;
  std::string ebin = in;
  if (jsonl) {  // parsed and checked once, into a temporary .ebin: its labels decide the split
    ebin = temps.add(temp_name(out_prefix + "-split.ebin"));
    try {
      convert_jsonl_to_ebin(in, ebin, 0);
    } catch (const Error& e) {
      // The temporary is split's own: a failure to write it names the output the user asked for.
      const std::string message = e.what();
      for (const std::string& own : {ebin, out_prefix + "-split.ebin"})  // its name, or the one it stands for
        if (message.rfind(own, 0) == 0)
          fail(parts[0].path, message.substr(own.size()), " (writing the temporary .ebin that split parses ", in,
               " into, beside it)");
      throw;
    }
  }
  const Dataset dataset = Dataset::open(ebin, in);  // errors name the user's file, not the temporary
  if (dataset.num_samples() == 0) fail(in, ": no samples to split");
  const std::vector<std::vector<int64_t>> samples = split_samples(dataset, options.fractions, options.seed);
  for (size_t k = 0; k < parts.size(); ++k) {
    parts[k].samples = static_cast<int64_t>(samples[k].size());
    if (samples[k].empty())
      fail(parts[k].path, ": part '", names[k], "' (fraction ", options.fractions[k], ") would get no samples of ",
           in, "'s ", dataset.num_samples());
  }
  std::vector<std::string> temporaries;
  for (const SplitPart& part : parts) temporaries.push_back(temps.add(temp_name(part.path)));
  if (jsonl) {
    std::vector<int> part_of(static_cast<size_t>(dataset.num_samples()));
    for (size_t k = 0; k < samples.size(); ++k)
      for (int64_t s : samples[k]) part_of[static_cast<size_t>(s)] = static_cast<int>(k);
    std::vector<std::unique_ptr<FileWriter>> outs;
    for (const std::string& temporary : temporaries) outs.push_back(std::make_unique<FileWriter>(temporary));
    write_jsonl_parts(in, dataset.seq_len(), part_of, outs);
    for (auto& out : outs) out->close();
  } else {
    for (size_t k = 0; k < parts.size(); ++k) write_ebin_samples(temporaries[k], dataset, samples[k]);
  }
  for (size_t k = 0; k < parts.size(); ++k) commit_file(temporaries[k], parts[k].path);
  temps.remove_all();
  return parts;
}

}  // namespace enhanced
