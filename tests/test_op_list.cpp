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
#include "core/profiler.h"

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

// A backend whose ops only record their names (generated from the list, so it has every op).
class RecordingBackend final : public Backend {
 public:
  std::vector<std::string> calls;

  std::string name() const override { return "recording"; }
  std::string description() const override { return "records op names"; }
  bool host_visible() const override { return true; }
  bool native_bf16() const override { return false; }
  size_t memory_capacity() const override { return 0; }
  void* alloc(size_t) override { return nullptr; }
  void free(void*) override {}
  void to_device(void*, const void*, size_t) override {}
  void to_host(void*, const void*, size_t) override {}
  void copy(void*, const void*, size_t) override {}
  void zero(void*, size_t) override {}
  void synchronize() override {}
  std::unique_ptr<DeviceTimer> timer() override { return nullptr; }
  void set_threads(int) override {}
  double peak_flops(MatPrec) override { return 0; }

#define CLM_TEST_RECORD(name, R, params, args, cpu, cuda) \
  R name params override {                                \
    calls.push_back(#name);                               \
    return R();                                           \
  }
  CLM_BACKEND_OPS(CLM_TEST_RECORD)
#undef CLM_TEST_RECORD
};

// Calls op `f` of `be` with value-initialised arguments (null pointers, zero shapes).
template <typename R, typename... A>
void call_with_zeros(Backend& be, R (Backend::*f)(A...)) {
  (be.*f)(std::decay_t<A>{}...);
}

TEST(OpList, TheDecoratorForwardsEveryOpInAScopeNamedAfterIt) {
  RecordingBackend inner;
  Profiler prof;
  ProfiledBackend pb(inner, prof);
  std::vector<std::string> names;
#define CLM_TEST_CALL(name, R, params, args, cpu, cuda) \
  call_with_zeros(pb, &Backend::name);                  \
  names.push_back(#name);
  CLM_BACKEND_OPS(CLM_TEST_CALL)
#undef CLM_TEST_CALL
  EXPECT_EQ(inner.calls, names);
  ASSERT_EQ(prof.events.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(std::string(prof.events[i].op), names[i]);
    EXPECT_EQ(prof.events[i].flops, 0) << names[i] << ": zero shapes, zero FLOPs";
    EXPECT_EQ(prof.events[i].bytes, 0) << names[i] << ": zero shapes, zero bytes";
  }
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
