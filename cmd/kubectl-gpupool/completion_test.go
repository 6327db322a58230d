package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// complete runs the plugin's `__complete ARGS...` as a user, as a shell (or kubectl's
// kubectl_complete-gpupool) does, and returns the candidates' names, their lines
// (name, tab, description) and the directive.
func (w *world) complete(user string, args ...string) (names, lines []string, directive string) {
	w.t.Helper()
	out, err := w.run(user, "", append([]string{"__complete"}, args...)...)
	if err != nil {
		w.t.Fatalf("__complete %v: %v\n%s", args, err, out)
	}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		switch {
		case strings.HasPrefix(l, ":"):
			directive = l
		case l == "" || strings.HasPrefix(l, "Completion ended"):
		default:
			lines = append(lines, l)
			names = append(names, strings.SplitN(l, "\t", 2)[0])
		}
	}
	return names, lines, directive
}

// TestCompletion: __complete offers the pools (by their layout and Ready), the named
// pool's layouts for switch and plan --layout, IANA zones for --tz, only the pools a
// verb can change, never files for a pool, and nothing (no error) to a user who may not
// list pools. --namespace is neither offered nor accepted: pools are cluster-scoped.
func TestCompletion(t *testing.T) {
	w := newWorld(t, "cp-")
	w.create(w.pool())
	w.operate("day")
	noFiles := fmt.Sprintf(":%d", cobra.ShellCompDirectiveNoFileComp)

	names, lines, dir := w.complete("viewer", "status", "cp-")
	if !slices.Equal(names, []string{w.name}) || lines[0] != w.name+"\tlayout day, Ready" || dir != noFiles {
		t.Errorf("status cp-<TAB>: %q %s, want %s described as layout day, Ready, and no files", lines, dir, w.name)
	}
	names, lines, _ = w.complete("viewer", "switch", w.name, "")
	if !slices.Equal(names, []string{"day", "night"}) || !strings.HasSuffix(lines[0], "4 workers, active") || !strings.HasSuffix(lines[1], "1 worker") {
		t.Errorf("switch %s <TAB>: %q, want day (4 workers, active) and night (1 worker)", w.name, lines)
	}
	if names, _, _ = w.complete("viewer", "switch", w.name, "night", ""); len(names) != 0 {
		t.Errorf("switch %s night <TAB>: %q, want nothing (no third argument)", w.name, names)
	}
	if names, _, _ = w.complete("viewer", "plan", w.name, "--layout", "n"); !slices.Equal(names, []string{"night"}) {
		t.Errorf("plan %s --layout n<TAB>: %q, want night", w.name, names)
	}
	if names, _, dir = w.complete("viewer", "status", "--tz", "Europe/Ber"); !slices.Equal(names, []string{"Europe/Berlin"}) || dir != noFiles {
		t.Errorf("--tz Europe/Ber<TAB>: %q %s, want Europe/Berlin", names, dir)
	}
	if names, _, _ = w.complete("viewer", "--tz", "ut"); !slices.Contains(names, "UTC") {
		t.Errorf("--tz ut<TAB>: %q, want UTC", names)
	}

	// Only the pools the verb can change: no override to resume, nothing to unpause.
	for verb, want := range map[string]bool{"pause": true, "unpause": false, "resume": false, "history": true, "reset-budget": true} {
		if names, _, _ := w.complete("editor", verb, "cp-"); slices.Contains(names, w.name) != want {
			t.Errorf("%s cp-<TAB>: %q; offering %s: want %v", verb, names, w.name, want)
		}
	}

	// A user who may not list pools gets no candidates and no error, as kubectl does.
	if names, _, dir = w.complete("nobody", "status", ""); len(names) != 0 || dir != noFiles {
		t.Errorf("status <TAB> as nobody: %q %s", names, dir)
	}

	// Flags: kubectl's connection flags and --tz, never --namespace.
	names, _, _ = w.complete("viewer", "status", "--")
	if !slices.Contains(names, "--context") || !slices.Contains(names, "--tz") || slices.Contains(names, "--namespace") {
		t.Errorf("status --<TAB>: %q, want --context and --tz, not --namespace", names)
	}
	for _, args := range [][]string{{"status", w.name, "-n", "default"}, {"status", w.name, "--namespace", "default"}} {
		if out, err := w.run("viewer", "", args...); err == nil || !strings.Contains(err.Error(), "unknown") {
			t.Errorf("%v: %v\n%s; want an unknown flag", args, err, out)
		}
	}
	out, err := w.run("viewer", "", "status", "--help")
	if err != nil || strings.Contains(out, "--namespace") || !strings.Contains(out, "--context") {
		t.Errorf("status --help: %v, lists --namespace or lacks --context:\n%s", err, out)
	}
}

// TestExitCodes: a declined prompt exits 3, nothing changed; any other error exits 1.
func TestExitCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{errDeclined("not confirmed"), exitDeclined},
		{fmt.Errorf("switch: %w", errDeclined("not confirmed")), exitDeclined},
		{errors.New("patching pool lab: the object has been modified"), exitFailed},
	} {
		if got := exitCode(tc.err); got != tc.want {
			t.Errorf("exitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	if exitDeclined == exitFailed || exitDeclined == 0 {
		t.Errorf("a declined prompt exits %d, not told apart from success or failure", exitDeclined)
	}
}
