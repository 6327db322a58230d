package main

import (
	"strings"
	"testing"
)

// TestPlanLive: plan --live reads the credentials Secret the pool names with the user's
// own credentials, so it works for a user who may read it and fails with the API
// server's refusal, not the operator's namespace policy, for one who may not.
func TestPlanLive(t *testing.T) {
	w := newWorld(t, "lv-")
	w.create(w.pool())
	w.operate("day")

	w.ok("admin", "", []string{"plan", w.name, "--live", "--layout", "night"},
		"wants night", "ParkRequired", "lv-day-1", "PowerOnRequired", "lv-night-1")
	w.ok("admin", "", []string{"plan", w.name, "--live", "--credentials-namespace", credentialsNamespace},
		"wants day", "layout day: nothing to do")

	out, err := w.run("viewer", "", "plan", w.name, "--live", "--layout", "day")
	if err == nil || !strings.Contains(err.Error(), "forbidden") || strings.Contains(err.Error(), "may not be read from namespace") {
		t.Errorf("plan --live as viewer: %v\n%s\nwant the API server's forbidden, not the namespace policy", err, out)
	}

	// A namespace pinned by the user that the pool does not name: nothing is read.
	out, err = w.run("admin", "", "plan", w.name, "--live", "--credentials-namespace", "elsewhere")
	if err == nil || !strings.Contains(err.Error(), `may not be read from namespace "`+credentialsNamespace+`"`) {
		t.Errorf("plan --live --credentials-namespace elsewhere: %v\n%s", err, out)
	}
}
