package inventory

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestProfileFrameBufferMiB(t *testing.T) {
	good := map[string]int64{
		"grid_p100-4q":          4096,
		"grid_p100-16q":         16384,
		"grid_m60-0q":           512,
		"grid_m10-8b":           8192,
		"grid_t4-16c":           16384,
		"grid_a40-48a":          49152,
		"nvidia_l40s-48q":       49152,
		"nvidia_a100-3-20c":     20480,
		"grid_a100d-7-80c":      81920,
		"nvidia_a100dx-7-80c":   81920,
		"nvidia_a100-1-5cme":    5120,
		"nvidia_h100xm-1-10cme": 10240,
		"nvidia_a30-1-6cme":     6144,
		"nvidia_h200x-141c":     144384,
	}
	re := regexp.MustCompile(ProfileNamePattern)
	for name, want := range good {
		got, err := ProfileFrameBufferMiB(name)
		if err != nil || got != want {
			t.Errorf("ProfileFrameBufferMiB(%q) = %d, %v; want %d", name, got, err, want)
		}
		if !re.MatchString(name) {
			t.Errorf("ProfileNamePattern refuses %q", name)
		}
	}
	for _, name := range []string{
		"p100-4q", "grid_p100-4", "grid_p100-4qq", "grid_p100-4x", "grid_p100-4cme", // no MIG slice count for ME
		"grid_a100-8-40c", "grid_a100-0-40c", "grid_a100-3-0c", "grid_a100-3-20q",
		"grid_p100-99999999999999999999q", "grid_p100-9223372036854775807q", "grid_p100-1000q",
		"GRID_P100-4Q", "grid_100-4q", "grid_p100--4q", "grid_p100-4q ",
	} {
		if got, err := ProfileFrameBufferMiB(name); err == nil {
			t.Errorf("ProfileFrameBufferMiB(%q) = %d, want an error", name, got)
		}
		if re.MatchString(name) {
			t.Errorf("ProfileNamePattern accepts %q", name)
		}
	}
}

// The CRD's CEL rule on workers[].profile is a copy of ProfileNamePattern (markers cannot
// refer to Go constants); admission and the planner must accept the same names.
func TestCRDProfilePatternIsProfileNamePattern(t *testing.T) {
	crd, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "gpupool.dev_gpupoolprofiles.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "self.matches('" + ProfileNamePattern + "')"; !strings.Contains(string(crd), want) {
		t.Errorf("the CRD's profile rule is not %s: update the marker on Worker.Profile and run make manifests", want)
	}
}
