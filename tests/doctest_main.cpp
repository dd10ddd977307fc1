// Shared doctest main. It decides skips before any case runs: it lists the cases the command line
// selects, checks what their suites need (tests/requirements.hpp), leaves out the suites whose needs
// are unmet here and says why, and exits 77 (CTest: skipped) when nothing else was selected, or when
// everything else passed. A failure of any case that ran is a failure, never a skip.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include "requirements.hpp"

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace tz_test {
namespace {

struct need {
  std::string suite, what;
  requirement_check check;
};

std::vector<need>& needs() {
  static std::vector<need> all;
  return all;
}

// The suite of every case the probe run listed, in order (one entry per case).
std::vector<std::string>& listed_suites() {
  static std::vector<std::string> suites;
  return suites;
}

// A reporter that only records what a --list-test-cases run selected (nothing is printed).
struct selection_reporter : doctest::IReporter {
  explicit selection_reporter(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData& q) override {
    for (unsigned i = 0; i < q.num_data; ++i) listed_suites().emplace_back(q.data[i]->m_test_suite);
  }
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_REPORTER("tz_selection", 0, selection_reporter);

// A doctest option's name without dashes, the "dt-" prefix or "=value": "--dt-test-suite=x" -> "test-suite".
std::string_view option_name(std::string_view arg) {
  const auto start = arg.find_first_not_of('-');
  if (start == 0 || start == std::string_view::npos) return {};
  arg.remove_prefix(start);
  if (arg.starts_with("dt-")) arg.remove_prefix(3);
  return arg.substr(0, arg.find('='));
}

// Options that make doctest answer a question (help, listings, counts) instead of running cases.
bool is_query(int argc, char** argv) {
  static const std::set<std::string_view> queries{
      "?", "h", "help", "v", "version", "c", "count", "ltc", "list-test-cases", "lts", "list-test-suites",
      "lr", "list-reporters", "nr", "no-run"};
  for (int i = 1; i < argc; ++i) {
    if (queries.contains(option_name(argv[i]))) return true;
  }
  return false;
}

// The suites of the cases this command line selects (one entry per case), from a doctest listing
// run with the same filters, whose output goes to the recording reporter only.
std::vector<std::string> selected_suites(int argc, char** argv) {
  static const std::set<std::string_view> output{"r", "reporters", "o", "out"};
  std::vector<const char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (!output.contains(option_name(argv[i]))) args.push_back(argv[i]);
  }
  args.push_back("--list-test-cases");
  args.push_back("--reporters=tz_selection");
  doctest::Context probe(static_cast<int>(args.size()), args.data());
  probe.run();
  return listed_suites();
}

// suite -> why it cannot run here, for the suites among `suites` with an unmet need.
std::map<std::string, std::string> unmet_needs(const std::set<std::string>& suites) {
  std::map<std::string, std::string> reasons;  // by `what`: each check runs once
  std::map<std::string, std::string> out;
  for (const auto& n : needs()) {
    if (!suites.contains(n.suite) || out.contains(n.suite)) continue;
    auto known = reasons.find(n.what);
    if (known == reasons.end()) known = reasons.emplace(n.what, n.check()).first;
    if (!known->second.empty()) out[n.suite] = n.what + ": " + known->second;
  }
  return out;
}

}  // namespace

suite_needs::suite_needs(std::string suite, std::string what, requirement_check check) {
  needs().push_back({std::move(suite), std::move(what), std::move(check)});
}

}  // namespace tz_test

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  if (tz_test::needs().empty() || tz_test::is_query(argc, argv)) return context.run();

  const auto listed = tz_test::selected_suites(argc, argv);
  const auto unmet = tz_test::unmet_needs(std::set<std::string>(listed.begin(), listed.end()));
  if (unmet.empty()) return context.run();
  std::size_t runnable = 0;
  for (const auto& suite : listed) runnable += unmet.contains(suite) ? 0 : 1;
  for (const auto& [suite, why] : unmet) {
    std::fprintf(stderr, "skipped: the cases of suite \"%s\" need %s\n", suite.c_str(), why.c_str());
  }
  if (runnable == 0) {
    std::fprintf(stderr, "no selected case can run here: exit 77 (skipped)\n");
    return 77;
  }
  for (const auto& entry : unmet) context.addFilter("test-suite-exclude", entry.first.c_str());
  const int rc = context.run();
  if (rc != 0) return rc;
  std::fprintf(stderr, "the other %zu selected case(s) passed; exit 77 (skipped) for the cases left out\n", runnable);
  return 77;
}
