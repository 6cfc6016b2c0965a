package procutil

import "testing"

func TestUnescapeMountinfo(t *testing.T) {
	for in, want := range map[string]string{
		`plain`:         "plain",
		`a\040b`:        "a b",
		`\134\054`:      `\,`,
		`trailing\04`:   `trailing\04`,
		`not\9990octal`: `not\9990octal`,
		`\`:             `\`,
	} {
		if got := UnescapeMountinfo(in); got != want {
			t.Errorf("UnescapeMountinfo(%q) = %q, want %q", in, got, want)
		}
	}
}
