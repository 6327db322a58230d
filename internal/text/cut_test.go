package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCut: a message that fits is kept whole; one that does not is cut to at most n
// bytes, ends with the mark, and stays valid UTF-8 whatever the runes at the cut.
func TestCut(t *testing.T) {
	if got := Cut("short", 10); got != "short" {
		t.Errorf("Cut kept %q of a message that fits", got)
	}
	if got := Cut(strings.Repeat("a", 20), 10); got != "aaaa"+Mark {
		t.Errorf("Cut = %q, want %q", got, "aaaa"+Mark)
	}
	for _, s := range []string{strings.Repeat("é", 40), strings.Repeat("日本", 30), "a" + strings.Repeat("🙂", 20), strings.Repeat("x", 3)} {
		for n := 0; n <= len(s)+1; n++ {
			got := CutWith(s, n, "...")
			if len(s) <= n {
				if got != s {
					t.Fatalf("CutWith(%q, %d) = %q, want it whole", s, n, got)
				}
				continue
			}
			if !utf8.ValidString(got) || !strings.HasSuffix(got, "...") || !strings.HasPrefix(s, strings.TrimSuffix(got, "...")) {
				t.Fatalf("CutWith(%q, %d) = %q: not a valid prefix of it with the mark", s, n, got)
			}
			if n >= len("...") && len(got) > n {
				t.Fatalf("CutWith(%q, %d) = %q: %d bytes", s, n, got, len(got))
			}
		}
	}
}
