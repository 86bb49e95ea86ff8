// JSON Lines interchange <-> .ebin. One sample a line:
//   {"label": 3, "tokens": [[[7, 12], [], [45]], ...]}   (T positions of exactly 3 lists)
//   {"tokens": [...]}                                     (unlabeled: every line of the file)
#pragma once

#include <cstdint>
#include <string>

namespace enhanced {

// The most ids field 0 or field 1 of one position may hold: what bounds a line, and so the
// memory a conversion needs, by T.
constexpr int kMaxIdsPerList = 4096;
// Before T is known (the first line, without --seq-len), a line may be at most this long.
constexpr uint64_t kFirstLineLimit = uint64_t{64} << 20;

// The longest line a sample of T positions can be (every list full of 10-digit ids, spaced as
// Python's json.dumps spaces them); T = 0: kFirstLineLimit. A longer line is refused, naming
// this bound (jsonl_line_limit_reason), before more than it is read.
uint64_t jsonl_line_limit(int seq_len);
std::string jsonl_line_limit_reason(int seq_len);

struct ConvertStats {
  int64_t samples = 0;
  int seq_len = 0;
  uint64_t bytes_written = 0;
  bool labeled = true;
};

// Streams a JSONL file into a .ebin without holding the input in memory. Every sample must have
// `seq_len` positions (0: as many as the first sample). Lines without "label" make an unlabeled
// .ebin; a file is all labeled or all unlabeled. Writes to a temporary file beside `out_path` and renames it at the end,
// so a failed conversion leaves no output. Throws Error naming file, line and position.
ConvertStats convert_jsonl_to_ebin(const std::string& jsonl_path, const std::string& out_path,
                                   int seq_len, bool show_progress = false);

// Writes a .ebin back to JSONL (field 1 included): the round trip is exact.
ConvertStats convert_ebin_to_jsonl(const std::string& ebin_path, const std::string& out_path);

}  // namespace enhanced
