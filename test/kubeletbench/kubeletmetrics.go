package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The metrics the bench reads, and the label each is counted by ("": a
// single series).
const (
	plegRelistSum   = "kubelet_pleg_relist_duration_seconds_sum"
	plegRelistCount = "kubelet_pleg_relist_duration_seconds_count"
	// netshimRPCs counts the RPCs netshim served, by rpc (and code,
	// added up here): all of kubelet's, where kubelet's own
	// kubelet_runtime_operations_total misses those its stats provider
	// makes (ListContainerStats, ImageFsInfo). netshimDockerCalls counts
	// netshim's Docker API calls, by call.
	netshimRPCs        = "netshim_rpc_duration_seconds_count"
	netshimDockerCalls = "netshim_docker_call_duration_seconds_count"
)

var (
	kubeletWanted = map[string]string{plegRelistSum: "", plegRelistCount: ""}
	netshimWanted = map[string]string{netshimRPCs: "rpc", netshimDockerCalls: "call"}
)

// samples are the values of the wanted metrics of one scrape: by metric
// name, then by the value of its counting label ("" for a single
// series). Series that differ only in other labels are added up.
type samples map[string]map[string]float64

// get is the value of one series, 0 when absent.
func (s samples) get(name, label string) float64 { return s[name][label] }

// parseSamples reads Prometheus' text format, keeping the metrics named in
// wanted. Comments, other metrics and lines of other metrics that this
// reader cannot parse are skipped; a malformed line of a wanted metric is
// an error, as is a wanted series without its counting label.
func parseSamples(r io.Reader, wanted map[string]string) (samples, error) {
	s := samples{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, " ")
		labels := ""
		if i := strings.IndexByte(line, '{'); i >= 0 && i < len(name) {
			j := strings.LastIndexByte(line, '}')
			if j < i {
				continue
			}
			name, labels, rest = line[:i], line[i+1:j], strings.TrimSpace(line[j+1:])
		}
		key, ok := wanted[name]
		if !ok {
			continue
		}
		// A sample may carry a timestamp after the value.
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return s, fmt.Errorf("no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return s, fmt.Errorf("bad value in %q: %w", line, err)
		}
		label := ""
		if key != "" {
			if label = labelValue(labels, key); label == "" {
				return s, fmt.Errorf("no %s label in %q", key, line)
			}
		}
		if s[name] == nil {
			s[name] = map[string]float64{}
		}
		s[name][label] += v
	}
	return s, sc.Err()
}

// labelValue returns the value of key in a label set (`a="x",b="y"`); the
// values read here hold no quotes or commas.
func labelValue(labels, key string) string {
	for _, kv := range strings.Split(labels, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// scrape reads the wanted metrics of url. TLS is not verified: the
// endpoints are our own kubelet's (self-signed, open to anonymous
// requests by the harness's config) and netshim's, on loopback.
func scrape(ctx context.Context, url string, wanted map[string]string) (samples, error) {
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			Proxy:             nil,
			DisableKeepAlives: true,
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
		},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return parseSamples(resp.Body, wanted)
}

// plegMean is the mean PLEG relist duration between two scrapes of
// kubelet; false when kubelet did not relist in between.
func plegMean(a, b samples) (time.Duration, bool) {
	n := b.get(plegRelistCount, "") - a.get(plegRelistCount, "")
	if n <= 0 {
		return 0, false
	}
	sum := b.get(plegRelistSum, "") - a.get(plegRelistSum, "")
	return time.Duration(sum / n * float64(time.Second)), true
}

// countsBetween is how much each series of a counter grew between two
// scrapes (series that did not grow are left out).
func countsBetween(a, b samples, name string) map[string]float64 {
	out := map[string]float64{}
	for label, v := range b[name] {
		if d := v - a[name][label]; d > 0 {
			out[label] = d
		}
	}
	return out
}
