// The parallel kernels of TokenCorpus (token_corpus_internal.h): every token of the mapped files
// read once, in chunks of 1 Mi tokens spread over oneTBB's threads. The loops over one chunk are
// plain min/max and compare loops over the file's own id type, which the compiler vectorizes:
// the scan runs at the speed the memory (or the page cache) delivers the bytes.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <limits>

#include "token_corpus_internal.h"

namespace stoker::data::detail {

namespace {

constexpr int64_t kChunkTokens = int64_t{1} << 20;

struct Chunk {
  const uint8_t* data;  // first token of the chunk
  int64_t first;        // its global position
  int64_t size;
};

std::vector<Chunk> chunks_of(const std::vector<TokenFile>& files, int width) {
  std::vector<Chunk> chunks;
  for (const TokenFile& f : files)
    for (int64_t i = 0; i < f.size; i += kChunkTokens)
      chunks.push_back({f.data + i * width, f.first + i, std::min(kChunkTokens, f.size - i)});
  return chunks;
}

struct Range {
  int64_t mn = std::numeric_limits<int64_t>::max();
  int64_t mx = std::numeric_limits<int64_t>::min();
  size_t first_bad_chunk = std::numeric_limits<size_t>::max();
};

template <typename T>
inline void min_max_loop(const T* p, int64_t n, T& mn_out, T& mx_out) {
  T mn = std::numeric_limits<T>::max(), mx = std::numeric_limits<T>::lowest();
  for (int64_t i = 0; i < n; ++i) {
    const T v = p[i];
    mn = v < mn ? v : mn;
    mx = v > mx ? v : mx;
  }
  mn_out = mn;
  mx_out = mx;
}

// One function per id type, compiled for AVX2 too and picked at load time (the baseline x86-64
// build has SSE2 only, which has no unsigned 16/32-bit min/max): x86-64 with GCC or Clang, but
// not under ThreadSanitizer, whose binaries crash at startup in an ifunc resolver.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STOKER_SCAN_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define STOKER_SCAN_UNDER_TSAN 1
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(STOKER_SCAN_UNDER_TSAN)
#define STOKER_SCAN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define STOKER_SCAN_CLONES
#endif
#define STOKER_MIN_MAX(T)                                                \
  STOKER_SCAN_CLONES void min_max(const T* p, int64_t n, T& mn, T& mx) { \
    min_max_loop(p, n, mn, mx);                                          \
  }
STOKER_MIN_MAX(uint8_t)
STOKER_MIN_MAX(int8_t)
STOKER_MIN_MAX(uint16_t)
STOKER_MIN_MAX(int16_t)
STOKER_MIN_MAX(int32_t)
STOKER_MIN_MAX(uint32_t)
STOKER_MIN_MAX(int64_t)
#undef STOKER_MIN_MAX

}  // namespace

IdRange scan_ids(const std::vector<TokenFile>& files, TokenType type, int64_t vocab_size) {
  return visit_token_type(type, [&](auto zero) {
    using T = decltype(zero);
    const std::vector<Chunk> chunks = chunks_of(files, sizeof(T));
    const auto bad = [&](int64_t v) { return vocab_size > 0 && (v < 0 || v >= vocab_size); };
    const Range r = oneapi::tbb::parallel_reduce(
        oneapi::tbb::blocked_range<size_t>(0, chunks.size(), 1), Range{},
        [&](const oneapi::tbb::blocked_range<size_t>& range, Range acc) {
          for (size_t c = range.begin(); c != range.end(); ++c) {
            T mn, mx;
            min_max(reinterpret_cast<const T*>(chunks[c].data), chunks[c].size, mn, mx);
            acc.mn = std::min<int64_t>(acc.mn, mn);
            acc.mx = std::max<int64_t>(acc.mx, mx);
            if (bad(mn) || bad(mx)) acc.first_bad_chunk = std::min(acc.first_bad_chunk, c);
          }
          return acc;
        },
        [](Range a, const Range& b) {
          a.mn = std::min(a.mn, b.mn);
          a.mx = std::max(a.mx, b.mx);
          a.first_bad_chunk = std::min(a.first_bad_chunk, b.first_bad_chunk);
          return a;
        });
    IdRange out;
    out.min_id = chunks.empty() ? 0 : r.mn;
    out.max_id = chunks.empty() ? 0 : r.mx;
    if (r.first_bad_chunk < chunks.size()) {
      const Chunk& c = chunks[r.first_bad_chunk];
      const T* p = reinterpret_cast<const T*>(c.data);
      for (int64_t i = 0; i < c.size; ++i)
        if (bad(static_cast<int64_t>(p[i]))) {
          out.first_bad = c.first + i;
          break;
        }
    }
    return out;
  });
}

std::vector<int64_t> delimited_documents(const std::vector<TokenFile>& files, TokenType type,
                                         int64_t delimiter, bool begins) {
  int64_t total = 0;
  for (const TokenFile& f : files) total = std::max(total, f.first + f.size);
  std::vector<int64_t> marks;  // positions where a document begins (sorted)
  visit_token_type(type, [&](auto zero) {
    using T = decltype(zero);
    if (delimiter < 0 || delimiter < static_cast<int64_t>(std::numeric_limits<T>::lowest()) ||
        delimiter > static_cast<int64_t>(std::numeric_limits<T>::max()))
      return 0;  // no id can be the delimiter
    const T d = static_cast<T>(delimiter);
    const std::vector<Chunk> chunks = chunks_of(files, sizeof(T));
    std::vector<std::vector<int64_t>> found(chunks.size());
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<size_t>(0, chunks.size(), 1),
                              [&](const oneapi::tbb::blocked_range<size_t>& range) {
                                for (size_t c = range.begin(); c != range.end(); ++c) {
                                  const T* p = reinterpret_cast<const T*>(chunks[c].data);
                                  const int64_t shift = chunks[c].first + (begins ? 0 : 1);
                                  for (int64_t i = 0; i < chunks[c].size; ++i)
                                    if (p[i] == d) found[c].push_back(shift + i);
                                }
                              });
    size_t n = 0;
    for (const auto& v : found) n += v.size();
    marks.reserve(n);
    for (const auto& v : found) marks.insert(marks.end(), v.begin(), v.end());
    return 0;
  });
  std::vector<int64_t> begins_out;
  begins_out.reserve(marks.size() + files.size() + 2);
  begins_out.push_back(0);
  if (begins) {
    for (const int64_t m : marks)
      if (m != 0) begins_out.push_back(m);
  } else {
    // Documents end after each delimiter and at the end of each file.
    std::vector<int64_t> file_starts;
    for (const TokenFile& f : files) file_starts.push_back(f.first);
    std::vector<int64_t> merged;
    merged.reserve(marks.size() + file_starts.size());
    std::merge(marks.begin(), marks.end(), file_starts.begin(), file_starts.end(),
               std::back_inserter(merged));
    for (const int64_t m : merged)
      if (m > begins_out.back() && m < total) begins_out.push_back(m);
  }
  begins_out.push_back(total);
  return begins_out;
}

}  // namespace stoker::data::detail
