#include "common/recording_source.h"

#include <utility>
#include <vector>

#include "stoker/core/error.h"

namespace stoker::program {

RecordingSource::RecordingSource(data::BatchSource& inner, const std::filesystem::path& path,
                                 std::string program)
    : inner_(inner),
      path_(path),
      program_(std::move(program)),
      out_(path, std::ios::binary | std::ios::trunc) {
  STOKER_CHECK(out_.good(), program_, ": cannot write ", path.string());
}

bool RecordingSource::next(data::Batch& batch) {
  if (!inner_.next(batch)) return false;
  write_ids(batch.input);
  write_ids(batch.target);
  ++batches_;
  return true;
}

void RecordingSource::close() {
  out_.close();
  STOKER_CHECK(!out_.fail(), program_, ": writing ", path_.string(), " failed");
}

void RecordingSource::write_ids(const Tensor& ids) {
  std::vector<int32_t> v;
  if (ids.dtype() == DType::i32) {
    v = ids.to_vector<int32_t>();
  } else {
    STOKER_CHECK(ids.dtype() == DType::i64, program_, ": token ids of dtype ",
                 dtype_name(ids.dtype()));
    const std::vector<int64_t> w = ids.to_vector<int64_t>();
    v.assign(w.begin(), w.end());
  }
  out_.write(reinterpret_cast<const char*>(v.data()),
             static_cast<std::streamsize>(v.size() * sizeof(int32_t)));
}

}  // namespace stoker::program
