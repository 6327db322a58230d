package version

import "testing"

func TestGetPrefersTheStampedVersion(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v1.2.3-4-gabcdef"
	if got := Get(); got != "v1.2.3-4-gabcdef" {
		t.Fatalf("Get() = %q, want the stamped version", got)
	}
	Version = ""
	if got := Get(); got == "" {
		t.Fatal("Get() is empty without a stamp")
	}
}
