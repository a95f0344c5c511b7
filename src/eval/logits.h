// Full logits of token rows, for comparing clocklm with other runtimes (the exported models'
// tests): each row is one causal sequence from position 0, run through the KV-cache forward of
// GPT (the path sampling uses), and every position's softcapped logits over the true vocabulary
// (padding columns dropped) come back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace clm {

struct GPT;

// Rows of token ids, one row per non-empty line, separated by spaces; every row the same length.
// Throws Error naming `path` and the line on anything else.
std::vector<std::vector<int32_t>> read_token_rows(const std::string& path);

// logits[(r * T + t) * V + j] for row r, position t, token j < V (fp32).
std::vector<float> row_logits(GPT& model, const std::vector<std::vector<int32_t>>& rows);

}  // namespace clm
