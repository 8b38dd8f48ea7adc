package main

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// quantile is the q-quantile of sorted samples (nearest rank).
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// distribution sums up samples.
type distribution struct {
	n                  int
	p50, p90, p99, max time.Duration
}

func distributionOf(samples []time.Duration) distribution {
	s := slices.Clone(samples)
	slices.Sort(s)
	d := distribution{n: len(s), p50: quantile(s, .5), p90: quantile(s, .9), p99: quantile(s, .99)}
	if len(s) > 0 {
		d.max = s[len(s)-1]
	}
	return d
}

func pooled(runs [][]time.Duration) []time.Duration {
	var all []time.Duration
	for _, r := range runs {
		all = append(all, r...)
	}
	return all
}

func summarize(samples []time.Duration) string {
	d := distributionOf(samples)
	return fmt.Sprintf("n=%d p50=%s p90=%s p99=%s max=%s", d.n, ms(d.p50), ms(d.p90), ms(d.p99), ms(d.max))
}

// ms formats a duration in milliseconds, to a tenth.
func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

// histogramQuantiles are quantiles read from a Prometheus histogram's
// buckets: the upper bound of the bucket that holds each, so "≤".
type histogramQuantiles struct {
	n        int
	mean     time.Duration
	p50, p99 string
}

// quantilesBetween reads the observations of histogram name (summed over
// its labels) made between two scrapes.
func quantilesBetween(before, after, name string) histogramQuantiles {
	b0, c0, s0 := histogramOf(before, name)
	b1, c1, s1 := histogramOf(after, name)
	n := c1 - c0
	q := histogramQuantiles{n: int(n), p50: "–", p99: "–"}
	if n <= 0 {
		return q
	}
	q.mean = time.Duration((s1 - s0) / n * float64(time.Second))
	bounds := slices.Sorted(maps.Keys(b1))
	at := func(p float64) string {
		for _, le := range bounds {
			if b1[le]-b0[le] >= p*n {
				if math.IsInf(le, 1) {
					return "+Inf"
				}
				return ms(time.Duration(le * float64(time.Second)))
			}
		}
		return "+Inf"
	}
	q.p50, q.p99 = at(.5), at(.99)
	return q
}

// histogramOf sums a histogram's cumulative buckets, count and sum over
// its label sets.
func histogramOf(scrape, name string) (buckets map[float64]float64, count, sum float64) {
	buckets = map[float64]float64{}
	for line := range strings.SplitSeq(scrape, "\n") {
		fields := strings.Fields(line)
		if len(fields) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(fields[1], 64)
		if err != nil {
			continue
		}
		metric := fields[0]
		switch {
		case strings.HasPrefix(metric, name+"_bucket{"):
			_, le, ok := strings.Cut(metric, `le="`)
			if !ok {
				continue
			}
			le, _, _ = strings.Cut(le, `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err == nil {
				buckets[bound] += v
			}
		case metric == name+"_count" || strings.HasPrefix(metric, name+"_count{"):
			count += v
		case metric == name+"_sum" || strings.HasPrefix(metric, name+"_sum{"):
			sum += v
		}
	}
	return buckets, count, sum
}
