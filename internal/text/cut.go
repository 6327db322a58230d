// Package text bounds the messages gpupool writes (conditions, events, status fields),
// so that a crowded pool cannot grow an object toward the API server's limits.
package text

import "unicode/utf8"

// Mark ends a message that was cut.
const Mark = " [...]"

// Cut returns s when it has at most n bytes; else the longest prefix of s that, with
// Mark after it, has at most n bytes. It cuts between runes, never inside one, so that
// what is written stays valid UTF-8.
func Cut(s string, n int) string {
	return CutWith(s, n, Mark)
}

// CutWith is Cut with another mark.
func CutWith(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	keep := max(n-len(mark), 0)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + mark
}
