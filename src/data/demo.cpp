// The demo task (data/README.md): find the one position whose identifier holds a KEY sub-token
// right after a TRIGGER word, and report which segment of the sequence holds it.
#include "enhanced/demo.h"

#include <bit>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <vector>

#include "enhanced/atomic_file.h"
#include "enhanced/common.h"
#include "enhanced/jsonl.h"
#include "enhanced/random.h"

namespace enhanced {

namespace {

// The engine's portable generator (splitmix64), with the demo's own fixed draws on top, so the
// files are the same everywhere (data/emb.bin is checked against them).
struct Rng {
  Random random;
  // Integer in [lo, hi] (tiny modulo bias is irrelevant here, and fixed by definition).
  int between(int lo, int hi) { return lo + static_cast<int>(random.next_u64() % static_cast<uint64_t>(hi - lo + 1)); }
  // Float in [0, 1) from the top 24 bits: exact, no libm.
  float unit() { return static_cast<float>(random.next_u64() >> 40) * (1.0f / 16777216.0f); }
  bool chance(float p) { return unit() < p; }
};

constexpr int kReserved = 20;  // ids [0, 20) of each half are not background tokens

struct Sample {
  int label = 0;
  std::vector<std::vector<int32_t>> identifier, auxiliary;
  std::vector<int32_t> cur;
};

bool is_key(int id, int V) { return id >= 10 && id < 10 + kDemoKeyCount && V > 0; }
bool is_trigger(int id, int V) { return id >= V / 2 + 10 && id < V / 2 + 10 + kDemoTriggerCount; }

bool has_key(const std::vector<int32_t>& ids, int V) {
  for (int32_t id : ids)
    if (is_key(id, V)) return true;
  return false;
}

Sample make_sample(Rng& rng, const DemoOptions& o) {
  const int T = o.seq_len, V = o.vocab_size, half = V / 2;
  Sample s;
  s.identifier.resize(static_cast<size_t>(T));
  s.auxiliary.resize(static_cast<size_t>(T));
  s.cur.resize(static_cast<size_t>(T));
  auto background_subtoken = [&] { return rng.between(kReserved, half - 1); };
  auto background_word = [&] { return rng.between(half + kReserved, V - 1); };
  for (int t = 0; t < T; ++t) {
    auto& id = s.identifier[static_cast<size_t>(t)];
    if (!rng.chance(0.3f)) {
      int n = rng.between(1, 5);
      for (int k = 0; k < n; ++k) id.push_back(background_subtoken());
    }
    int na = rng.between(0, 2);
    for (int k = 0; k < na; ++k) s.auxiliary[static_cast<size_t>(t)].push_back(background_subtoken());
    s.cur[static_cast<size_t>(t)] = background_word();
  }
  auto put_key = [&](int t) {
    auto& id = s.identifier[static_cast<size_t>(t)];
    if (id.empty()) {
      int n = rng.between(1, 5);
      for (int k = 0; k < n; ++k) id.push_back(background_subtoken());
    }
    id[static_cast<size_t>(rng.between(0, static_cast<int>(id.size()) - 1))] =
        demo_key_id(rng.between(0, kDemoKeyCount - 1), V);
  };
  auto put_trigger = [&](int t) { s.cur[static_cast<size_t>(t)] = demo_trigger_id(rng.between(0, kDemoTriggerCount - 1), V); };

  // The marked position m: TRIGGER word at m-1, KEY sub-token in the identifier at m.
  const int m = rng.between(1, T - 1);
  put_trigger(m - 1);
  put_key(m);
  s.label = static_cast<int>(static_cast<int64_t>(m) * o.num_labels / T);

  // Distractors: KEYs not preceded by a TRIGGER, TRIGGERs not followed by a KEY.
  const int key_distractors = rng.between(1, 4);
  for (int k = 0, tries = 0; k < key_distractors && tries < 1000; ++tries) {
    int p = rng.between(0, T - 1);
    if (p == m || has_key(s.identifier[static_cast<size_t>(p)], V)) continue;
    if (p > 0 && is_trigger(s.cur[static_cast<size_t>(p - 1)], V)) continue;
    put_key(p);
    ++k;
  }
  const int trigger_distractors = rng.between(1, 4);
  for (int k = 0, tries = 0; k < trigger_distractors && tries < 1000; ++tries) {
    int p = rng.between(0, T - 1);
    if (is_trigger(s.cur[static_cast<size_t>(p)], V)) continue;
    if (p + 1 < T && has_key(s.identifier[static_cast<size_t>(p + 1)], V)) continue;
    put_trigger(p);
    ++k;
  }
  int marked = 0;
  for (int t = 1; t < T; ++t)
    if (is_trigger(s.cur[static_cast<size_t>(t - 1)], V) && has_key(s.identifier[static_cast<size_t>(t)], V)) ++marked;
  if (marked != 1) fail("demo: internal error: ", marked, " marked positions in a sample");
  return s;
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_list(std::string& out, const std::vector<int32_t>& ids) {
  out.push_back('[');
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k > 0) out.push_back(',');
    append_int(out, ids[k]);
  }
  out.push_back(']');
}

void write_split(const std::string& jsonl, const std::string& ebin, int64_t n, uint64_t stream,
                 const DemoOptions& o) {
  Rng rng{Random(o.seed ^ (stream * 0xD1B54A32D192ED03ull))};
  {
    TempFiles temps;
    const std::string tmp = temps.add(temp_name(jsonl, ""));
    FileWriter out(tmp);
    std::string line;
    for (int64_t i = 0; i < n; ++i) {
      Sample s = make_sample(rng, o);
      line.clear();
      line += "{\"label\":";
      append_int(line, s.label);
      line += ",\"tokens\":[";
      for (int t = 0; t < o.seq_len; ++t) {
        if (t > 0) line.push_back(',');
        line.push_back('[');
        append_list(line, s.identifier[static_cast<size_t>(t)]);
        line.push_back(',');
        append_list(line, s.auxiliary[static_cast<size_t>(t)]);
        line += ",[";
        append_int(line, s.cur[static_cast<size_t>(t)]);
        line += "]]";
      }
      line += "]}\n";
      out.write(line.data(), line.size());
    }
    out.close();
    commit_file(tmp, jsonl);
  }
  convert_jsonl_to_ebin(jsonl, ebin, o.seq_len, o.show_progress);
}

void write_embeddings(const std::string& path, const DemoOptions& o) {
  const int V = o.vocab_size, D = o.embedding_dim;
  Rng rng{Random(o.seed ^ 0xE3B0C44298FC1C14ull)};
  auto direction = [&] {
    std::vector<float> u(static_cast<size_t>(D));
    float norm = 0;
    for (auto& x : u) {
      x = rng.unit() * 2.0f - 1.0f;
      norm += x * x;
    }
    norm = std::sqrt(norm);
    for (auto& x : u) x /= norm;
    return u;
  };
  const std::vector<float> key_dir = direction();
  const std::vector<float> trigger_dir = direction();
  std::vector<float> table(static_cast<size_t>(V) * static_cast<size_t>(D));
  for (int v = 0; v < V; ++v) {
    const std::vector<float>* dir = is_key(v, V) ? &key_dir : is_trigger(v, V) ? &trigger_dir : nullptr;
    for (int d = 0; d < D; ++d) {
      float noise = (rng.unit() * 2.0f - 1.0f) * 0.1f;
      float base = dir != nullptr ? 0.8f * (*dir)[static_cast<size_t>(d)] : 0.0f;
      table[static_cast<size_t>(v) * static_cast<size_t>(D) + static_cast<size_t>(d)] = base + noise;
    }
  }
  static_assert(std::endian::native == std::endian::little, "emb.bin is written little-endian");
  TempFiles temps;
  const std::string tmp = temps.add(temp_name(path, ""));
  FileWriter out(tmp);
  out.write(table.data(), table.size() * sizeof(float));
  out.close();
  commit_file(tmp, path);
}

}  // namespace

int demo_key_id(int k, int vocab_size) {
  (void)vocab_size;
  return 10 + k;
}

int demo_trigger_id(int k, int vocab_size) { return vocab_size / 2 + 10 + k; }

DemoFiles write_demo(const std::string& dir, const DemoOptions& o) {
  if (o.vocab_size < 2 * (kReserved + 8)) fail("demo: vocabulary size must be at least ", 2 * (kReserved + 8));
  if (o.seq_len < 2) fail("demo: sequence length must be at least 2, got ", o.seq_len);
  if (o.num_labels < 1 || o.num_labels > o.seq_len)
    fail("demo: number of labels must be in [1, ", o.seq_len, "], got ", o.num_labels);
  if (o.embedding_dim < 1) fail("demo: embedding dimension must be positive, got ", o.embedding_dim);
  if (o.train_samples < 1 || o.valid_samples < 1 || o.test_samples < 1)
    fail("demo: every split needs at least one sample");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create directory: ", ec.message());
  remove_stale_temp_files(dir);
  const std::string base = (std::filesystem::path(dir) / "").string();
  DemoFiles f;
  f.train_jsonl = base + "train.jsonl";
  f.valid_jsonl = base + "valid.jsonl";
  f.test_jsonl = base + "test.jsonl";
  f.train_ebin = base + "train.ebin";
  f.valid_ebin = base + "valid.ebin";
  f.test_ebin = base + "test.ebin";
  f.embeddings = base + "emb.bin";
  write_split(f.train_jsonl, f.train_ebin, o.train_samples, 1, o);
  write_split(f.valid_jsonl, f.valid_ebin, o.valid_samples, 2, o);
  write_split(f.test_jsonl, f.test_ebin, o.test_samples, 3, o);
  write_embeddings(f.embeddings, o);
  return f;
}

}  // namespace enhanced
