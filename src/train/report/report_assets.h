// The report page's template (resources/report.html) and Debian's Chart.js,
// embedded at build time (cmake/embed_report_assets.cmake writes their definitions).
#pragma once

namespace ddp::train::detail {

extern const char* const kReportTemplate;  // with the placeholders @@CHART_JS@@ and @@DATA@@
extern const char* const kChartJs;         // /usr/share/javascript/chart.js/chart.min.js (libjs-chart.js)

}  // namespace ddp::train::detail
