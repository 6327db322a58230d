package webhook

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// maxShown is how much of a value a message quotes. A 4 KiB cron expression must not make
// a 12 KiB message, and the start of a value is enough to find it in the spec.
const maxShown = 64

// shown is a value as messages quote it: cut at maxShown bytes (on a rune boundary) with
// its full length said.
func shown(s string) string {
	if len(s) <= maxShown {
		return s
	}
	c := s[:maxShown]
	for !utf8.ValidString(c) {
		c = c[:len(c)-1]
	}
	return fmt.Sprintf("%s... (%d bytes)", c, len(s))
}

// quoteList quotes names for a message, at most ten of them.
func quoteList(names []string) string {
	const most = 10
	q := make([]string, 0, most+1)
	for i, n := range names {
		if i == most {
			q = append(q, fmt.Sprintf("and %d more", len(names)-most))
			break
		}
		q = append(q, fmt.Sprintf("%q", shown(n)))
	}
	return strings.Join(q, ", ")
}
