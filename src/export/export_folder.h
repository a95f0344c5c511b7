// What makes a folder an export of clocklm's, and so one `export --force` may replace: the marker
// file `.clocklm-export` that every export writes into its folder (a small JSON object: the format,
// the time, the clocklm version; see docs/FORMATS.md). A folder without it is the user's, and is
// never replaced.
#pragma once
#include <filesystem>
#include <string>

namespace clm {

inline constexpr const char* kExportMarker = ".clocklm-export";

// Writes the marker into `dir` (the export's temporary folder) for an export in `format`.
void write_export_marker(const std::filesystem::path& dir, const std::string& format);

// True when `dir` holds a marker that parses as one.
bool is_export_folder(const std::filesystem::path& dir);

// Refuses, in one line, to export into `target` (shown as `shown`) when it exists and is not a
// folder, or is not empty and either `force` is off or it is not an export (naming what it is
// instead: a run folder, a dataset). Called with the folder's lock held, after its repair.
void check_export_target(const std::filesystem::path& target, const std::string& shown, bool force);

}  // namespace clm
