package scale_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// families are the metric families of one scrape, by name.
type families map[string]*dto.MetricFamily

func parseMetrics(data []byte) (families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(data))
}

// scrapeChild reads a child's metrics (childMetrics).
func scrapeChild(t *testing.T, ctx context.Context, c *child) families {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.addr+childMetrics, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("metrics of %s: %v", c.role, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics of %s: %s, %v", c.role, resp.Status, err)
	}
	mfs, err := parseMetrics(data)
	if err != nil {
		t.Fatalf("metrics of %s: %v", c.role, err)
	}
	return mfs
}

// counts are counters of one kind by what they count ("LIST pods").
type counts map[string]float64

// requests are what the API server counted of the requests it served.
type requests struct {
	// api: apiserver_request_total by verb and resource ("LIST pods",
	// "POST pods/binding"), all response codes, groups and scopes
	// together.
	api counts
	// etcd: the API server's requests to etcd (etcd_requests_total) by
	// operation and resource ("get pods", "listWithCount pods").
	etcd counts
	// cache: the LISTs of pods the API server served from its watch
	// cache, by index (apiserver_cache_list_total; "" for a scan of all
	// pods), and its consistent reads from the cache
	// (apiserver_watch_cache_consistent_read_total, "consistent
	// success=true fallback=false").
	cache counts
}

// label returns the value of m's label name, "" when it has none.
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum returns the counters of family name by key(m), leaving out the
// key "".
func (mfs families) sum(name string, key func(*dto.Metric) string) counts {
	c := counts{}
	for _, m := range mfs[name].GetMetric() {
		if k := key(m); k != "" {
			c[k] += m.GetCounter().GetValue()
		}
	}
	return c
}

// readRequests scrapes the API server's /metrics (one GET of a
// non-resource URL, which requests leaves out with the other non-resource
// requests).
func readRequests(t *testing.T, ctx context.Context, admin kubernetes.Interface) requests {
	t.Helper()
	data, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	mfs, err := parseMetrics(data)
	if err != nil {
		t.Fatalf("API server metrics: %v", err)
	}
	if mfs["apiserver_request_total"] == nil {
		t.Fatal("the API server's metrics have no apiserver_request_total")
	}
	r := requests{
		api: mfs.sum("apiserver_request_total", func(m *dto.Metric) string {
			res := label(m, "resource")
			if res == "" {
				return "" // /metrics, /healthz, discovery
			}
			if sub := label(m, "subresource"); sub != "" {
				res += "/" + sub
			}
			return label(m, "verb") + " " + res
		}),
		etcd: mfs.sum("etcd_requests_total", func(m *dto.Metric) string {
			return label(m, "operation") + " " + label(m, "resource")
		}),
		cache: mfs.sum("apiserver_cache_list_total", func(m *dto.Metric) string {
			if label(m, "resource") != "pods" {
				return ""
			}
			return "LIST pods index=" + label(m, "index")
		}),
	}
	maps.Copy(r.cache, mfs.sum("apiserver_watch_cache_consistent_read_total", func(m *dto.Metric) string {
		if label(m, "resource") != "pods" {
			return ""
		}
		return "consistent success=" + label(m, "success") + " fallback=" + label(m, "fallback")
	}))
	return r
}

// perPod is r less before, divided by pods, without the zeros.
func (r requests) perPod(before requests, pods int) requests {
	return requests{api: r.api.perPod(before.api, pods), etcd: r.etcd.perPod(before.etcd, pods), cache: r.cache.perPod(before.cache, pods)}
}

func (r requests) String() string {
	return fmt.Sprintf("%v\n\tetcd requests per pod %v\n\tpod LISTs from the watch cache per pod %v", r.api, r.etcd, r.cache)
}

// perPod is c less before, divided by pods, without the zeros.
func (c counts) perPod(before counts, pods int) counts {
	d := counts{}
	for k, v := range c {
		if v -= before[k]; v != 0 {
			d[k] = v / float64(pods)
		}
	}
	return d
}

// total is the sum of all counts.
func (c counts) total() float64 {
	var n float64
	for _, v := range c {
		n += v
	}
	return n
}

// String lists the counts that round to at least 0.01 (the total counts
// them all).
func (c counts) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(c)) {
		if math.Abs(c[k]) >= 0.005 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, c[k]))
		}
	}
	return fmt.Sprintf("%.2f: %s", c.total(), strings.Join(parts, ", "))
}

// schedMetrics are kube-scheduler's scheduling attempts by result and the
// mean duration of its successful attempts (scheduling and binding
// cycle), from its metrics. The scheduler records some of them
// asynchronously, so a measurement's counts may lag by a few pods.
type schedMetrics struct {
	attempts         map[string]float64
	cycleSum, cycles float64
	// The scheduling algorithm's (Filter and Score, sequential per pod)
	// and the extension points' durations: sum and count each.
	algorithm [2]float64
	points    map[string][2]float64
}

func readSchedMetrics(mfs families) schedMetrics {
	m := schedMetrics{attempts: map[string]float64{}, points: map[string][2]float64{}}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			result, point := "", ""
			for _, l := range s.GetLabel() {
				switch l.GetName() {
				case "result":
					result = l.GetValue()
				case "extension_point":
					point = l.GetValue()
				}
			}
			switch mf.GetName() {
			case "scheduler_scheduling_algorithm_duration_seconds":
				m.algorithm[0] += s.GetHistogram().GetSampleSum()
				m.algorithm[1] += float64(s.GetHistogram().GetSampleCount())
			case "scheduler_framework_extension_point_duration_seconds":
				pt := m.points[point]
				pt[0] += s.GetHistogram().GetSampleSum()
				pt[1] += float64(s.GetHistogram().GetSampleCount())
				m.points[point] = pt
			case "scheduler_schedule_attempts_total":
				m.attempts[result] += s.GetCounter().GetValue()
			case "scheduler_scheduling_attempt_duration_seconds":
				if result == "scheduled" {
					m.cycleSum += s.GetHistogram().GetSampleSum()
					m.cycles += float64(s.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return m
}

// since is m less before.
func (m schedMetrics) since(before schedMetrics) schedMetrics {
	d := schedMetrics{attempts: map[string]float64{}, cycleSum: m.cycleSum - before.cycleSum, cycles: m.cycles - before.cycles,
		algorithm: [2]float64{m.algorithm[0] - before.algorithm[0], m.algorithm[1] - before.algorithm[1]}, points: map[string][2]float64{}}
	for k, v := range m.points {
		d.points[k] = [2]float64{v[0] - before.points[k][0], v[1] - before.points[k][1]}
	}
	for k, v := range m.attempts {
		if v -= before.attempts[k]; v != 0 {
			d.attempts[k] = v
		}
	}
	return d
}

func (m schedMetrics) String() string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m.attempts)) {
		parts = append(parts, fmt.Sprintf("%s %.0f", k, m.attempts[k]))
	}
	mean := func(sum, n float64) time.Duration {
		if n == 0 {
			return 0
		}
		return time.Duration(sum / n * float64(time.Second)).Round(10 * time.Microsecond)
	}
	pts := []string{fmt.Sprintf("algorithm %v", mean(m.algorithm[0], m.algorithm[1]))}
	for _, k := range []string{"PreFilter", "Filter", "Score", "Reserve", "PreBind", "Bind"} {
		if v := m.points[k]; v[1] > 0 {
			pts = append(pts, fmt.Sprintf("%s %v", k, mean(v[0], v[1])))
		}
	}
	return fmt.Sprintf("attempts: %s; mean attempt to bound %v; mean %s", strings.Join(parts, ", "), mean(m.cycleSum, m.cycles), strings.Join(pts, ", "))
}
