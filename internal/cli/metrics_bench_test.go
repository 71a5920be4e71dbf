package cli

import (
	"io"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkMetrics10000Pairs runs claimctl metrics and claimctl list,
// alternating, on a root of 10,000 held pairs (writeHeldPairs): both read
// every key's head through one walk and judge each distinct owner once, so
// metrics should cost what list costs (metrics/list), which is what a timer
// pays every minute on such a root (ms/metrics).
//
//	go test -run '^$' -bench Metrics10000 -benchtime 5x ./internal/cli/
func BenchmarkMetrics10000Pairs(b *testing.B) {
	root := filepath.Join(b.TempDir(), "root")
	writeHeldPairs(b, root, 10000)
	getenv := func(string) string { return "" }
	var inMetrics, inList time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if code := run(testOptions, []string{"metrics", "--root", root}, nil, io.Discard, io.Discard, getenv, false); code != exitOK {
			b.Fatalf("metrics: exit %d", code)
		}
		inMetrics += time.Since(start)
		start = time.Now()
		if code := run(testOptions, []string{"list", "--root", root}, nil, io.Discard, io.Discard, getenv, false); code != exitOK {
			b.Fatalf("list: exit %d", code)
		}
		inList += time.Since(start)
	}
	b.ReportMetric(float64(inMetrics)/float64(inList), "metrics/list")
	b.ReportMetric(float64(inMetrics.Milliseconds())/float64(b.N), "ms/metrics")
}
