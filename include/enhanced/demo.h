// A small, deterministic demo task for the engine (see data/README.md): train/valid/test in
// JSONL and .ebin, plus a "pretrained" embedding table emb.bin (raw little-endian float32 V x D).
#pragma once

#include <cstdint>
#include <string>

namespace enhanced {

struct DemoOptions {
  int64_t train_samples = 4000;
  int64_t valid_samples = 500;
  int64_t test_samples = 500;
  int seq_len = 100;       // T
  int num_labels = 4;      // L: the label is the segment (T / L positions) holding the marked position
  int vocab_size = 2000;   // V: ids [0, V/2) are identifier sub-tokens, [V/2, V) are words
  int embedding_dim = 32;  // D of emb.bin
  uint64_t seed = 20240601;
  bool show_progress = false;
};

struct DemoFiles {
  std::string train_jsonl, valid_jsonl, test_jsonl;
  std::string train_ebin, valid_ebin, test_ebin;
  std::string embeddings;
};

// The marker vocabulary: KEY identifier sub-tokens and TRIGGER words (ids, for V >= 64).
inline constexpr int kDemoKeyCount = 10;
inline constexpr int kDemoTriggerCount = 10;
int demo_key_id(int k, int vocab_size);      // k in [0, kDemoKeyCount)
int demo_trigger_id(int k, int vocab_size);  // k in [0, kDemoTriggerCount)

// Writes the demo files into `dir` (created if missing). Same options, same bytes.
DemoFiles write_demo(const std::string& dir, const DemoOptions& options = {});

}  // namespace enhanced
