package main

import (
	"slices"
	"strings"
	"testing"
)

// TestManagerEnv: --manager-env takes KEY=value pairs (a value may hold '=' or be empty)
// and refuses anything else, naming the pair and what to write.
func TestManagerEnv(t *testing.T) {
	for in, want := range map[string][]string{
		"":                      nil,
		" , ":                   nil,
		"GOGC=50":               {"GOGC=50"},
		"GOGC=50,GOMEMLIMIT=1G": {"GOGC=50", "GOMEMLIMIT=1G"},
		"GODEBUG=gctrace=1,":    {"GODEBUG=gctrace=1"},
		"EMPTY=":                {"EMPTY="},
	} {
		got, err := managerEnv(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"GOGC", "=50", "GOGC=50,debug", "GO GC=50", "GO\tGC=1"} {
		if _, err := managerEnv(in); err == nil || !strings.Contains(err.Error(), "KEY=value") {
			t.Errorf("%q: %v, want an error asking for KEY=value", in, err)
		}
	}
}
