// The dashboard's pages, scripts and styles (src/serve/web/), compiled into the binary by
// cmake/embed_web.cmake: `clocklm serve` answers from these and never from the file system.
#pragma once
#include <cstddef>
#include <string_view>
#include <vector>

namespace clm {

struct WebAsset {
  const char* name;  // file name: "index.html", "app.js"
  const char* type;  // Content-Type
  const unsigned char* data;
  size_t size;
};

const std::vector<WebAsset>& web_assets();

// The asset with this exact file name, or null.
inline const WebAsset* find_web_asset(std::string_view name) {
  for (const auto& a : web_assets())
    if (name == a.name) return &a;
  return nullptr;
}

}  // namespace clm
