// enhanced-data: convert JSONL <-> .ebin, inspect a .ebin, write the demo data set.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>

#include "app.h"
#include "enhanced/atomic_file.h"
#include "enhanced/engine.h"
#include "enhanced/common.h"
#include "enhanced/dataset.h"
#include "enhanced/demo.h"
#include "enhanced/jsonl.h"
#include "enhanced/split.h"

namespace {

using enhanced::at_least;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void inspect(const std::string& path) {
  enhanced::Dataset ds = enhanced::Dataset::open(path);
  const auto& h = ds.header();
  std::printf("file:               %s\n", path.c_str());
  std::printf("file size:          %llu bytes\n", static_cast<unsigned long long>(ds.file_size()));
  std::printf("format version:     %u\n", h.version);
  std::printf("samples:            %lld\n", static_cast<long long>(ds.num_samples()));
  std::printf("positions (T):      %d\n", ds.seq_len());
  if (ds.has_labels()) std::printf("labels:             %d\n", ds.num_labels());
  else std::printf("labels:             none (unlabeled: for enhanced-predict)\n");
  std::printf("largest id:         %d\n", ds.max_token_id());
  std::printf("identifier ids:     %llu\n", static_cast<unsigned long long>(h.num_identifier_ids));
  std::printf("auxiliary ids:      %llu\n", static_cast<unsigned long long>(h.num_auxiliary_ids));
  std::vector<int64_t> label_count(static_cast<size_t>(std::max(ds.num_labels(), 0)));
  std::map<size_t, int64_t> length_count;
  for (int64_t s = 0; s < ds.num_samples(); ++s) {
    if (ds.has_labels()) ++label_count[static_cast<size_t>(ds.label(s))];
    for (int t = 0; t < ds.seq_len(); ++t) ++length_count[ds.identifier(s, t).size()];
  }
  const double n = static_cast<double>(std::max<int64_t>(ds.num_samples(), 1));
  if (ds.has_labels()) std::printf("label histogram:\n");
  for (size_t l = 0; l < label_count.size(); ++l)
    std::printf("  %6zu: %10lld  (%5.1f%%)\n", l, static_cast<long long>(label_count[l]),
                100.0 * static_cast<double>(label_count[l]) / n);
  const double positions = n * ds.seq_len();
  std::printf("identifier length histogram (positions):\n");
  for (const auto& [len, count] : length_count)
    std::printf("  %6zu: %10lld  (%5.1f%%)%s\n", len, static_cast<long long>(count),
                100.0 * static_cast<double>(count) / positions, len == 0 ? "  empty" : "");
}

struct ConvertCommand {
  std::string in, out;
  int seq_len = 0;  // 0: from the first sample
  bool to_jsonl = false, progress = false;
};

CLI::App* add_convert(CLI::App& app, ConvertCommand& c) {
  auto* convert = app.add_subcommand("convert", "Convert JSONL -> .ebin or .ebin -> JSONL (by extension)");
  convert->add_option("IN", c.in, "Input file (.jsonl or .ebin)")->required();
  convert->add_option("OUT", c.out, "Output file")->required();
  convert->add_option("--seq-len,-T", c.seq_len,
                      "Positions per sample (T) of the JSONL input (default: those of the first sample; every "
                      "sample must have T)")
      ->check(at_least(1));
  convert->add_flag("--to-jsonl", c.to_jsonl, "Write JSONL from a .ebin input whatever the extensions");
  convert->add_flag("--progress", c.progress, "Show progress (lines/s) on stderr");
  return convert;
}

struct SplitCommand {
  std::string in, out_prefix;
  enhanced::SplitOptions options;
};

CLI::App* add_split(CLI::App& app, SplitCommand& c) {
  auto* split = app.add_subcommand(
      "split", "Split a .ebin or .jsonl set into parts (seeded; stratified by label where it has labels)");
  split->add_option("IN", c.in, "Input file (.jsonl or .ebin); the parts have its format")->required();
  split->add_option("OUT_PREFIX", c.out_prefix, "Parts are OUT_PREFIX-NAME.ebin (or .jsonl)")->required();
  split->add_option("--fractions", c.options.fractions, "Fraction of each part, summing to 1 (e.g. 0.8,0.1,0.1)")
      ->required()
      ->delimiter(',')
      ->check(enhanced::greater_than(0.0));
  split->add_option("--names", c.options.names, "Part names (default: train,valid,test / train,test / partK)")
      ->delimiter(',');
  split->add_option("--seed", c.options.seed, "Seed of the shuffle")->capture_default_str()->check(enhanced::seed_rule());
  return split;
}

void run_split(const SplitCommand& c) {
  for (const enhanced::SplitPart& part : enhanced::split_dataset(c.in, c.out_prefix, c.options))
    std::fprintf(stderr, "%s: %lld samples\n", part.path.c_str(), static_cast<long long>(part.samples));
}

CLI::App* add_demo(CLI::App& app, std::string& dir, enhanced::DemoOptions& o) {
  auto* demo = app.add_subcommand("demo", "Write the demo data set (train/valid/test .jsonl and .ebin, emb.bin)");
  demo->add_option("DIR", dir, "Output directory")->required();
  demo->add_option("--train", o.train_samples, "Training samples")->capture_default_str()->check(at_least(int64_t{1}));
  demo->add_option("--valid", o.valid_samples, "Validation samples")->capture_default_str()->check(at_least(int64_t{1}));
  demo->add_option("--test", o.test_samples, "Test samples")->capture_default_str()->check(at_least(int64_t{1}));
  demo->add_option("--seq-len,-T", o.seq_len, "Positions per sample")->capture_default_str()->check(at_least(2));
  demo->add_option("--labels", o.num_labels, "Number of labels (segments)")->capture_default_str()->check(at_least(1));
  demo->add_option("--vocab", o.vocab_size, "Vocabulary size V")->capture_default_str()->check(at_least(1));
  demo->add_option("--dim", o.embedding_dim, "Embedding dimension D of emb.bin")->capture_default_str()->check(at_least(1));
  demo->add_option("--seed", o.seed, "Random seed")->capture_default_str()->check(enhanced::seed_rule());
  return demo;
}

void run_convert(const ConvertCommand& c) {
  const bool ebin_in = ends_with(c.in, ".ebin"), jsonl_in = ends_with(c.in, ".jsonl");
  enhanced::ConvertStats st;
  if (c.to_jsonl || (ebin_in && !ends_with(c.out, ".ebin"))) {
    st = enhanced::convert_ebin_to_jsonl(c.in, c.out);
  } else if (jsonl_in || ends_with(c.out, ".ebin")) {
    st = enhanced::convert_jsonl_to_ebin(c.in, c.out, c.seq_len, c.progress);
  } else {
    enhanced::fail(c.in, ": cannot tell the direction from the extensions (.jsonl -> .ebin, .ebin -> .jsonl); "
                         "use --to-jsonl for .ebin -> JSONL");
  }
  std::fprintf(stderr, "%s: %lld %ssamples of %d positions, %llu bytes\n", c.out.c_str(),
               static_cast<long long>(st.samples), st.labeled ? "" : "unlabeled ", st.seq_len,
               static_cast<unsigned long long>(st.bytes_written));
}

// Help and version exit as CLI11 decides; any other parse error is one "error:" line.
int parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return enhanced::report_parse_error(app, e);
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  enhanced::remove_temp_files_on_signal();  // a conversion ended by SIGTERM or SIGINT leaves no temporaries
  try {
    CLI::App app{"enhanced-data: convert, inspect and generate datasets for the enhanced engine"};
    app.set_version_flag("--version", std::string(enhanced::version_string()));
    app.require_subcommand(1);
    ConvertCommand convert_command;
    CLI::App* convert = add_convert(app, convert_command);
    SplitCommand split_command;
    CLI::App* split = add_split(app, split_command);
    std::string inspect_path;
    auto* insp = app.add_subcommand("inspect", "Print a summary of a .ebin file");
    insp->add_option("FILE", inspect_path, ".ebin file")->required();
    std::string demo_dir;
    enhanced::DemoOptions demo_opts;
    CLI::App* demo = add_demo(app, demo_dir, demo_opts);
    if (const int code = parse(app, argc, argv); code >= 0) return code;

    if (*convert) {
      run_convert(convert_command);
    } else if (*split) {
      run_split(split_command);
    } else if (*insp) {
      inspect(inspect_path);
    } else if (*demo) {
      demo_opts.show_progress = false;
      auto f = enhanced::write_demo(demo_dir, demo_opts);
      std::fprintf(stderr, "wrote %s, %s, %s (+ .ebin) and %s\n", f.train_jsonl.c_str(), f.valid_jsonl.c_str(),
                   f.test_jsonl.c_str(), f.embeddings.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    std::replace(msg.begin(), msg.end(), '\n', ' ');
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
  }
}
