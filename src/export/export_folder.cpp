// The export marker and the destination check of `export` (see export_folder.h).
#include "export/export_folder.h"

#include <ctime>

#include <nlohmann/json.hpp>

#include "core/common.h"
#include "core/json_parse.h"

namespace clm {

namespace fs = std::filesystem;

namespace {

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// What a non-export folder is, for the refusal: clocklm's own kinds are named, since replacing a
// run or a dataset is the likeliest mistake.
std::string describe(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "run.json", ec) || fs::exists(dir / "checkpoints", ec)) return "a run folder";
  if (fs::exists(dir / "manifest.json", ec)) return "a dataset folder";
  return "not a folder clocklm exported";
}

}  // namespace

void write_export_marker(const fs::path& dir, const std::string& format) {
  const nlohmann::json j = {{"format", "clocklm-export-folder"},
                            {"export_format", format},
                            {"created", utc_now()},
                            {"clocklm_version", CLOCKLM_VERSION}};
  atomic_write((dir / kExportMarker).string(), j.dump(2) + "\n");
}

bool is_export_folder(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_regular_file(dir / kExportMarker, ec)) return false;
  nlohmann::json j;
  return try_parse_json(read_file((dir / kExportMarker).string()), j) && j.is_object() &&
         j.value("format", "") == "clocklm-export-folder";
}

void check_export_target(const fs::path& target, const std::string& shown, bool force) {
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(target, ec);
  if (!fs::exists(st)) return;
  if (fs::is_symlink(st)) fail("export: --out {} is a symbolic link; give the folder itself", shown);
  if (!fs::is_directory(st)) fail("export: {} exists and is not a folder", shown);
  if (fs::is_empty(target, ec)) return;
  if (!is_export_folder(target))
    fail("export: --out {} is {} (no {} in it); refusing to replace it, even with --force (choose another folder)",
         shown, describe(target), kExportMarker);
  if (!force) fail("export: {} holds an earlier export (pass --force to replace it)", shown);
}

}  // namespace clm
