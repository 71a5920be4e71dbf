// Package promtext writes metrics in the Prometheus text exposition format
// (version 0.0.4, what node_exporter's textfile collector and every
// Prometheus scrape read): for each metric family a # HELP and a # TYPE
// line, then its samples, one per line.
//
// It is the small part of the format claimctl needs — counters and gauges
// without timestamps — written by hand rather than through
// github.com/prometheus/common/expfmt and client_model, which would bring
// protobuf descriptors and their package initialisation into claimctl, a
// program whose start-up is paid by every supervisor's every claim (see
// docs/BENCHMARKS.md, "Two programs"), for about a hundred lines of escaping
// and formatting. What the format asks is enforced here rather than hoped
// for: Write refuses a metric or label name that is not one, a counter
// whose name does not end in _total and any other family whose name does,
// a reserved (__) or repeated label name, two samples of a family with the
// same labels, and a family named twice. Label values and help text are
// escaped as the format says (backslash, double quote in values, newline);
// an invalid UTF-8 byte in a value (a path is bytes) is written as U+FFFD,
// since the format is UTF-8.
//
// Tests feed its output to promtool check metrics (internal/cli), the
// format's own linter.
package promtext
