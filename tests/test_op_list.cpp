// The op list (backend/op_list.h) and what is generated from it: every op is a pure virtual of
// Backend that the profiling decorator forwards with a cost formula (checked at build time: an op
// without a formula leaves op_cost::<op> undefined at link), names are unique, and every `table`
// op has a kernel in each usable instruction-set variant's table.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/kernels.h"
#include "backend/profiled_backend.h"

namespace clm {
namespace {

// Abstract would mean an op of the list that the decorator does not forward.
static_assert(!std::is_abstract_v<ProfiledBackend>, "ProfiledBackend misses an op of op_list.h");

struct OpEntry {
  std::string name, cpu, cuda;
};

std::vector<OpEntry> op_entries() {
  std::vector<OpEntry> v;
#define CLM_TEST_OP_ENTRY(name, R, params, args, cpu, cuda) v.push_back({#name, #cpu, #cuda});
  CLM_BACKEND_OPS(CLM_TEST_OP_ENTRY)
#undef CLM_TEST_OP_ENTRY
  return v;
}

TEST(OpList, NamesAreUniqueAndTagsKnown) {
  std::set<std::string> seen;
  for (const OpEntry& e : op_entries()) {
    EXPECT_TRUE(seen.insert(e.name).second) << e.name << " listed twice";
    EXPECT_TRUE(e.cpu == "table" || e.cpu == "own") << e.name << ": cpu tag " << e.cpu;
    EXPECT_TRUE(e.cuda == "stream" || e.cuda == "own") << e.name << ": cuda tag " << e.cuda;
  }
  EXPECT_GE(seen.size(), 30u);
}

TEST(OpList, TableOpsAreTheCpuBackendKernels) {
  std::set<std::string> table;
  for (const OpEntry& e : op_entries())
    if (e.cpu == "table") table.insert(e.name);
  std::set<std::string> generated;
#define CLM_TEST_TABLE_NAME(field, fn, R, params, args) generated.insert(#field);
  CLM_CPU_BACKEND_KERNELS(CLM_TEST_TABLE_NAME)
#undef CLM_TEST_TABLE_NAME
  EXPECT_EQ(generated, table);
}

TEST(OpList, EveryTableOpHasAKernelInEveryUsableVariant) {
  const std::string selected = cpu_kernel_isa();
  for (const std::string& isa : cpu_kernel_isas_usable()) {
    set_cpu_kernel_isa(isa);
    const CpuKernels& k = cpu_kernels();
    EXPECT_EQ(std::string(k.isa), isa);
#define CLM_TEST_KERNEL_PRESENT(field, fn, R, params, args) \
  EXPECT_NE(k.field, nullptr) << isa << ": no kernel for " #field;
    CLM_CPU_KERNELS(CLM_TEST_KERNEL_PRESENT)
#undef CLM_TEST_KERNEL_PRESENT
  }
  set_cpu_kernel_isa(selected);
}

}  // namespace
}  // namespace clm
