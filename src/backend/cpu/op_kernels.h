// The CPU kernels that implement a Backend op with the op's own signature: the `table` entries of
// backend/op_list.h, declared here from that list (their contracts are written there and in
// ops.h, optim_kernels.h and matmul.h beside their kin). Each is one entry of the kernel table
// (kernels.h), defined once per instruction-set variant, and the CPU backend forwards the op to it.
#pragma once
#include <cstdint>

#include "backend/op_list.h"

// X(field, function, return type, (parameters), (arguments)) for each such kernel, in the form of
// the kernel table's list (kernels.h).
#define CLM_CPU_TABLE_ENTRY(X, name, R, params, args, cpu, cuda) CLM_OP_KEEP_##cpu(X(name, name, R, params, args))
#define CLM_CPU_BACKEND_KERNELS(X) CLM_BACKEND_OPS_WITH(CLM_CPU_TABLE_ENTRY, X)

namespace clm {

#define CLM_CPU_OP_KERNEL_DECLARE(field, fn, R, params, args) R fn params;
CLM_CPU_BACKEND_KERNELS(CLM_CPU_OP_KERNEL_DECLARE)
#undef CLM_CPU_OP_KERNEL_DECLARE

}  // namespace clm
