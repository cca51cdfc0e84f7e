// stoker: one include for the whole public API.
#pragma once

#include "stoker/core/allocator.h"
#include "stoker/core/device.h"
#include "stoker/core/dtype.h"
#include "stoker/core/error.h"
#include "stoker/core/half.h"
#include "stoker/core/rng.h"
#include "stoker/core/shape.h"
#include "stoker/core/stream.h"
#include "stoker/core/tensor.h"
#include "stoker/core/version.h"
#include "stoker/ops/copy.h"
#include "stoker/ops/elementwise.h"
#include "stoker/ops/gemm.h"
#include "stoker/ops/random.h"
#include "stoker/ops/reduce.h"
