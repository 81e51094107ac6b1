// docs/fusion.md quotes code from compiled files: every ```cpp block follows a marker
// `<!-- snippet: PATH NAME -->` and must equal (indentation removed) the lines between the two
// `// [NAME]` lines of PATH. This test fails when the page and the code drift apart.
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../support/catch.hpp"

#ifndef RCCLX_SOURCE_DIR
#  define RCCLX_SOURCE_DIR "."
#endif

namespace {

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  INFO("reading " << path);
  REQUIRE(f.good());
  std::vector<std::string> lines;
  for (std::string l; std::getline(f, l);) lines.push_back(l);
  return lines;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

// Lines with their common leading indentation removed, joined.
std::string dedent(const std::vector<std::string>& lines) {
  std::size_t ind = std::string::npos;
  for (const auto& l : lines)
    if (!trim(l).empty()) ind = std::min(ind, l.find_first_not_of(' '));
  std::ostringstream out;
  for (const auto& l : lines) out << (l.size() >= ind && ind != std::string::npos ? l.substr(ind) : trim(l)) << "\n";
  return out.str();
}

std::string region(const std::string& path, const std::string& name) {
  const auto lines = read_lines(std::string(RCCLX_SOURCE_DIR) + "/" + path);
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < lines.size(); ++i)
    if (trim(lines[i]) == "// [" + name + "]") at.push_back(i);
  INFO(path << ": markers // [" << name << "]");
  REQUIRE(at.size() == 2);
  return dedent(std::vector<std::string>(lines.begin() + at[0] + 1, lines.begin() + at[1]));
}

}  // namespace

TEST_CASE("docs/fusion.md: every C++ block is quoted from compiled code", "[fused][doc]") {
  const auto doc = read_lines(std::string(RCCLX_SOURCE_DIR) + "/docs/fusion.md");
  int quoted = 0;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    if (doc[i] != "```cpp") continue;
    INFO("docs/fusion.md line " << i + 1);
    REQUIRE(i > 0);
    const std::string marker = doc[i - 1], head = "<!-- snippet: ";
    REQUIRE(marker.rfind(head, 0) == 0);
    std::istringstream m(marker.substr(head.size()));
    std::string path, name;
    m >> path >> name;
    std::vector<std::string> block;
    std::size_t j = i + 1;
    for (; j < doc.size() && doc[j] != "```"; ++j) block.push_back(doc[j]);
    REQUIRE(j < doc.size());
    CAPTURE(path, name);
    REQUIRE(dedent(block) == region(path, name));
    ++quoted;
    i = j;
  }
  REQUIRE(quoted >= 5);
}
