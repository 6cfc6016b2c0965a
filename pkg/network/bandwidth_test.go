package network

import (
	"strings"
	"testing"
)

func TestExtractPodBandwidth(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	tests := []struct {
		name        string
		annotations map[string]string
		ingress     *int64
		egress      *int64
		errContains []string
	}{
		{name: "nil annotations"},
		{name: "unrelated annotations", annotations: map[string]string{"foo": "10M"}},
		{name: "decimal mega", annotations: map[string]string{IngressBandwidthAnnotation: "10M"}, ingress: i64(10_000_000)},
		{name: "binary giga", annotations: map[string]string{EgressBandwidthAnnotation: "1Gi"}, egress: i64(1 << 30)},
		{name: "kilo", annotations: map[string]string{IngressBandwidthAnnotation: "500k"}, ingress: i64(500_000)},
		{name: "fraction", annotations: map[string]string{IngressBandwidthAnnotation: "1.5M"}, ingress: i64(1_500_000)},
		{name: "fraction exact", annotations: map[string]string{IngressBandwidthAnnotation: "1.1M"}, ingress: i64(1_100_000)},
		{name: "fraction rounds up", annotations: map[string]string{IngressBandwidthAnnotation: "1000.5"}, ingress: i64(1001)},
		{name: "plain integer", annotations: map[string]string{EgressBandwidthAnnotation: "100000"}, egress: i64(100_000)},
		{name: "leading dot", annotations: map[string]string{EgressBandwidthAnnotation: ".5M"}, egress: i64(500_000)},
		{name: "plus sign", annotations: map[string]string{EgressBandwidthAnnotation: "+2k"}, egress: i64(2000)},
		{name: "exponent", annotations: map[string]string{EgressBandwidthAnnotation: "1e6"}, egress: i64(1_000_000)},
		{name: "exponent upper", annotations: map[string]string{EgressBandwidthAnnotation: "25E5"}, egress: i64(2_500_000)},
		{name: "both directions",
			annotations: map[string]string{IngressBandwidthAnnotation: "1M", EgressBandwidthAnnotation: "2Mi"},
			ingress:     i64(1_000_000), egress: i64(2 << 20)},
		{name: "minimum", annotations: map[string]string{IngressBandwidthAnnotation: "1k"}, ingress: i64(1000)},
		{name: "maximum", annotations: map[string]string{IngressBandwidthAnnotation: "1P"}, ingress: i64(1_000_000_000_000_000)},
		{name: "tera", annotations: map[string]string{IngressBandwidthAnnotation: "3T"}, ingress: i64(3_000_000_000_000)},
		{name: "kibi", annotations: map[string]string{IngressBandwidthAnnotation: "8Ki"}, ingress: i64(8192)},

		{name: "garbage", annotations: map[string]string{IngressBandwidthAnnotation: "fast"},
			errContains: []string{IngressBandwidthAnnotation, `"fast"`}},
		{name: "empty", annotations: map[string]string{EgressBandwidthAnnotation: ""},
			errContains: []string{EgressBandwidthAnnotation, "empty"}},
		{name: "unknown suffix", annotations: map[string]string{EgressBandwidthAnnotation: "10Mb"},
			errContains: []string{EgressBandwidthAnnotation, `"10Mb"`, "suffix"}},
		{name: "lower case mega is not a suffix", annotations: map[string]string{EgressBandwidthAnnotation: "10m"},
			errContains: []string{"suffix"}},
		{name: "space", annotations: map[string]string{EgressBandwidthAnnotation: "10 M"},
			errContains: []string{EgressBandwidthAnnotation}},
		{name: "two dots", annotations: map[string]string{EgressBandwidthAnnotation: "1.2.3M"},
			errContains: []string{EgressBandwidthAnnotation}},
		{name: "negative", annotations: map[string]string{IngressBandwidthAnnotation: "-10M"},
			errContains: []string{IngressBandwidthAnnotation, `"-10M"`, "positive"}},
		{name: "zero", annotations: map[string]string{IngressBandwidthAnnotation: "0"},
			errContains: []string{IngressBandwidthAnnotation, "positive"}},
		{name: "too small", annotations: map[string]string{IngressBandwidthAnnotation: "999"},
			errContains: []string{IngressBandwidthAnnotation, `"999"`, "minimum"}},
		{name: "too large", annotations: map[string]string{EgressBandwidthAnnotation: "2P"},
			errContains: []string{EgressBandwidthAnnotation, `"2P"`, "maximum"}},
		{name: "too large binary", annotations: map[string]string{EgressBandwidthAnnotation: "1Ei"},
			errContains: []string{"maximum"}},
		{name: "huge exponent", annotations: map[string]string{EgressBandwidthAnnotation: "1e999"},
			errContains: []string{"maximum"}},
		{name: "exponent too long", annotations: map[string]string{EgressBandwidthAnnotation: "1e9999"},
			errContains: []string{"suffix"}},
		{name: "bad egress with good ingress",
			annotations: map[string]string{IngressBandwidthAnnotation: "1M", EgressBandwidthAnnotation: "x"},
			errContains: []string{EgressBandwidthAnnotation}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ingress, egress, err := ExtractPodBandwidth(tc.annotations)
			if len(tc.errContains) > 0 {
				if err == nil {
					t.Fatalf("want error, got ingress=%v egress=%v", deref(ingress), deref(egress))
				}
				for _, s := range tc.errContains {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if ingress != nil || egress != nil {
					t.Errorf("values returned with an error: %v %v", deref(ingress), deref(egress))
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if deref(ingress) != deref(tc.ingress) || (ingress == nil) != (tc.ingress == nil) {
				t.Errorf("ingress = %v, want %v", deref(ingress), deref(tc.ingress))
			}
			if deref(egress) != deref(tc.egress) || (egress == nil) != (tc.egress == nil) {
				t.Errorf("egress = %v, want %v", deref(egress), deref(tc.egress))
			}
		})
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
