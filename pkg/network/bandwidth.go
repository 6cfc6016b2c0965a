package network

import (
	"fmt"
	"math/big"
	"strings"
)

// Pod annotations that ask for traffic shaping. Their values are
// Kubernetes quantities in bits per second.
const (
	IngressBandwidthAnnotation = "kubernetes.io/ingress-bandwidth"
	EgressBandwidthAnnotation  = "kubernetes.io/egress-bandwidth"
)

// Bounds of an accepted bandwidth, in bits per second. They match what
// kubelet accepted (1k to 1P), so a pod spec behaves the same here as it
// did under dockershim: below 1k the kernel shaper is useless and above
// 1P the value is almost certainly a typo.
const (
	MinBandwidth int64 = 1000
	MaxBandwidth int64 = 1000 * 1000 * 1000 * 1000 * 1000
)

// ExtractPodBandwidth reads the bandwidth annotations of a pod. A nil
// pointer means the direction is not limited. It returns an error naming
// the annotation and its value when a present annotation is not a
// quantity or is out of [MinBandwidth, MaxBandwidth]; the runtime rejects
// such a pod before creating anything.
func ExtractPodBandwidth(annotations map[string]string) (ingress, egress *int64, err error) {
	ingress, err = bandwidthAnnotation(annotations, IngressBandwidthAnnotation)
	if err != nil {
		return nil, nil, err
	}
	egress, err = bandwidthAnnotation(annotations, EgressBandwidthAnnotation)
	if err != nil {
		return nil, nil, err
	}
	return ingress, egress, nil
}

func bandwidthAnnotation(annotations map[string]string, key string) (*int64, error) {
	value, ok := annotations[key]
	if !ok {
		return nil, nil
	}
	bits, err := parseQuantity(value)
	if err != nil {
		return nil, fmt.Errorf("invalid annotation %s=%q: %w", key, value, err)
	}
	switch {
	case bits.Sign() <= 0:
		return nil, fmt.Errorf("invalid annotation %s=%q: bandwidth must be positive", key, value)
	case bits.Cmp(big.NewInt(MinBandwidth)) < 0:
		return nil, fmt.Errorf("invalid annotation %s=%q: bandwidth is below the minimum of 1k bits/s", key, value)
	case bits.Cmp(big.NewInt(MaxBandwidth)) > 0:
		return nil, fmt.Errorf("invalid annotation %s=%q: bandwidth is above the maximum of 1P bits/s", key, value)
	}
	v := bits.Int64()
	return &v, nil
}

// quantitySuffixes maps a Kubernetes quantity suffix to its multiplier.
var quantitySuffixes = map[string]*big.Int{
	"":   big.NewInt(1),
	"k":  pow(10, 3),
	"M":  pow(10, 6),
	"G":  pow(10, 9),
	"T":  pow(10, 12),
	"P":  pow(10, 15),
	"E":  pow(10, 18),
	"Ki": pow(2, 10),
	"Mi": pow(2, 20),
	"Gi": pow(2, 30),
	"Ti": pow(2, 40),
	"Pi": pow(2, 50),
	"Ei": pow(2, 60),
}

func pow(base, exp int64) *big.Int {
	return new(big.Int).Exp(big.NewInt(base), big.NewInt(exp), nil)
}

// parseQuantity parses the subset of Kubernetes quantity syntax that makes
// sense for a rate: an optionally signed decimal number ("100000", "1.5")
// followed by a decimal (k M G T P E), binary (Ki ... Ei) or exponent
// ("e3", "E6") suffix, with no spaces. Fractions are rounded up to a whole
// unit, as Quantity.Value() does. Arithmetic is exact (big.Rat) so that
// "1.1M" is 1100000 and not 1099999.
func parseQuantity(s string) (*big.Int, error) {
	if s == "" {
		return nil, fmt.Errorf("empty quantity")
	}
	rest := s
	negative := false
	switch rest[0] {
	case '+':
		rest = rest[1:]
	case '-':
		negative = true
		rest = rest[1:]
	}

	// Mantissa: digits with at most one decimal point, at least one digit.
	end, digits, dots := 0, 0, 0
	for end < len(rest) {
		c := rest[end]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' {
			dots++
		} else {
			break
		}
		end++
	}
	if digits == 0 || dots > 1 {
		return nil, fmt.Errorf("not a quantity: expected a number such as 10M, 1.5Gi or 100000")
	}
	mantissa, ok := new(big.Rat).SetString(rest[:end])
	if !ok {
		return nil, fmt.Errorf("not a quantity: bad number %q", rest[:end])
	}

	suffix := rest[end:]
	value := new(big.Rat)
	if mult, ok := quantitySuffixes[suffix]; ok {
		value.Mul(mantissa, new(big.Rat).SetInt(mult))
	} else if exp, ok := parseExponent(suffix); ok {
		scale := new(big.Rat).SetInt(pow(10, absInt(exp)))
		if exp < 0 {
			scale.Inv(scale)
		}
		value.Mul(mantissa, scale)
	} else {
		return nil, fmt.Errorf("unknown suffix %q (use k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent like e6)", suffix)
	}
	if negative {
		value.Neg(value)
	}

	// Round up to a whole number of bits per second.
	num, den := value.Num(), value.Denom()
	q, m := new(big.Int).DivMod(num, den, new(big.Int))
	if m.Sign() != 0 {
		q.Add(q, big.NewInt(1))
	}
	return q, nil
}

// parseExponent parses "e3", "E-2", "e+6". A bare "E" is exa and is
// handled by the suffix table before this is tried. Exponents are
// bounded so that a hostile value cannot make big.Int allocate gigabytes.
func parseExponent(s string) (int64, bool) {
	if len(s) < 2 || (s[0] != 'e' && s[0] != 'E') {
		return 0, false
	}
	body := s[1:]
	neg := false
	if body[0] == '+' || body[0] == '-' {
		neg = body[0] == '-'
		body = body[1:]
	}
	if body == "" || len(body) > 3 || strings.TrimLeft(body, "0123456789") != "" {
		return 0, false
	}
	var exp int64
	for _, c := range body {
		exp = exp*10 + int64(c-'0')
	}
	if neg {
		exp = -exp
	}
	return exp, true
}

func absInt(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
