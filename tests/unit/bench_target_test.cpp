// Where brisk bench sends its requests (--url) and how report.html shows them.
#include <stdlib.h>

#include <gtest/gtest.h>

#include "bench/html_page.h"
#include "bench/html_report.h"
#include "bench/target_endpoint.h"
#include "scratch_dir.h"

namespace brisk::bench {
namespace {

TargetEndpoint parsed(const std::string& url) {
  std::string error;
  auto target = parse_target_url(url, error);
  EXPECT_TRUE(target.has_value()) << url << ": " << error;
  return target.value_or(TargetEndpoint{});
}

}  // namespace

TEST(TargetEndpoint, HostPortAndPathPrefixAreRead) {
  const TargetEndpoint target = parsed("http://gateway:8000/llm/");
  EXPECT_EQ(target.host, "gateway");
  EXPECT_EQ(target.port, "8000");
  EXPECT_EQ(target.route("/v1/models"), "/llm/v1/models");
  EXPECT_EQ(target.host_header(), "gateway:8000");
  EXPECT_EQ(parsed("http://localhost").port, "80");
  std::string error;
  EXPECT_FALSE(parse_target_url("https://a:1", error));
  EXPECT_FALSE(parse_target_url("ftp://a:1", error));
  EXPECT_FALSE(parse_target_url("http://:8080", error));
}

TEST(TargetEndpoint, AnIpv6HostKeepsItsBracketsInTheHostHeaderAndTheUrl) {
  const TargetEndpoint target = parsed("http://[::1]:8080/v");
  EXPECT_EQ(target.host, "::1");  // what the resolver takes
  EXPECT_EQ(target.port, "8080");
  // "::1:8080" is no host: servers that check Host (RFC 9110 7.2) answer 400.
  EXPECT_EQ(target.host_header(), "[::1]:8080");
  EXPECT_EQ(target.url(), "http://[::1]:8080/v");
  EXPECT_EQ(parsed("http://[fe80::1]").host_header(), "[fe80::1]:80");
}

TEST(HtmlReport, TextIsEscaped) {
  EXPECT_EQ(html_escape(R"(<b a="1">&</b>)"), R"(&lt;b a="1"&gt;&amp;&lt;/b&gt;)");
  EXPECT_EQ(html_escape("gemma3-270m"), "gemma3-270m");
}

TEST(HtmlReport, AModelNameOrUrlIsShownAsTextNotMarkup) {
  testing::ScratchDir dir;
  const auto chartjs = dir.path() / "chart.js";
  std::ofstream(chartjs) << "/* Chart.js stand-in: the page's markup is what is checked */";
  ASSERT_EQ(setenv("BRISK_CHARTJS", chartjs.c_str(), 1), 0);
  BenchReport report;
  report.target.model = "<script>alert(1)</script>";
  report.target.url = "http://h:1/<img src=x onerror=alert(2)>";
  report.workload = {{"input_tokens_dist", "<i>64</i>"}, {"output_tokens_dist", "8"}};
  std::string error;
  const auto page = dir.path() / "report.html";
  ASSERT_TRUE(write_html_report(report, page, error)) << error;
  unsetenv("BRISK_CHARTJS");
  const std::string html = testing::read_file(page);
  EXPECT_EQ(html.find("<script>alert"), std::string::npos);
  EXPECT_EQ(html.find("<img"), std::string::npos);
  EXPECT_EQ(html.find("<i>"), std::string::npos);
  EXPECT_NE(html.find("model &lt;script&gt;alert(1)&lt;/script&gt;"), std::string::npos);
  EXPECT_NE(html.find("&lt;img src=x onerror=alert(2)&gt;"), std::string::npos);
}

}  // namespace brisk::bench
