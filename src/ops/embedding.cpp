// Public embedding_forward / embedding_backward: validation, then dispatch. Range-checking the
// ids themselves needs their values, so it happens in the backends (the CPU throws; the GPU
// cannot without a host sync and writes NaN rows instead, see ops/embedding.h).
#include "stoker/ops/embedding.h"

#include "ops/embedding_stubs.h"
#include "ops/validate.h"

namespace stoker::ops {

namespace {
void check_ids(const char* op, const Tensor& ids) {
  detail::check_defined(op, "ids", ids);
  STOKER_CHECK(ids.dtype() == DType::i32 || ids.dtype() == DType::i64, "ops::", op, ": ids is ",
               ids.str(), "; expected i32 or i64 indices");
}

void check_table(const char* op, const char* name, const Tensor& table) {
  detail::check_defined(op, name, table);
  STOKER_CHECK(table.dtype() == DType::f32 && table.rank() == 2, "ops::", op, ": ", name, " is ",
               table.str(), "; expected f32[V, D] (one row per id)");
}

void check_rows(const char* op, const char* name, const Tensor& rows, const Tensor& ids,
                const Tensor& table) {
  detail::check_float(op, name, rows);
  STOKER_CHECK(rows.rank() == 2 && rows.size(0) == ids.numel() && rows.size(1) == table.size(1),
               "ops::", op, ": ", name, " is ", rows.str(), " for ids ", ids.str(), " and table ",
               table.str(), "; expected [", ids.numel(), ", ", table.size(1),
               "] (one row of the table per id)");
}

// Both passes: ids, a table (or its gradient) and one row per id (y, or dy), on one device.
void check_embedding(const char* op, const Tensor& ids, const char* table_name, const Tensor& table,
                     const char* rows_name, const Tensor& rows) {
  check_ids(op, ids);
  check_table(op, table_name, table);
  check_rows(op, rows_name, rows, ids, table);
  detail::check_backend(op, table);
  detail::check_same_device(op, table_name, table, "ids", ids);
  detail::check_same_device(op, table_name, table, rows_name, rows);
}
}  // namespace

void embedding_forward(const Tensor& y, const Tensor& ids, const Tensor& table) {
  check_embedding("embedding_forward", ids, "table", table, "y", y);
  if (y.numel() > 0) embedding_forward_stub(table.device(), y, ids, table);
}

void embedding_backward(const Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  check_embedding("embedding_backward", ids, "dtable", dtable, "dy", dy);
  if (dy.numel() > 0) embedding_backward_stub(dtable.device(), dtable, dy, ids);
}

}  // namespace stoker::ops
